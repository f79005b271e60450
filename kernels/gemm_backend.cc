#include "kernels/gemm_backend.h"

#include <vector>

#include "kernels/gemm_batch.h"

namespace matmul {

absl::StatusOr<GemmRunInfo> GemmBackend::RunBatch(
    absl::Span<const GemmProblem* const> problems, bool on_device) {
  if (problems.size() == 1) {
    return on_device ? RunDevice(*problems[0]) : RunHost(*problems[0]);
  }
  absl::StatusOr<CombinedProblem> combined = CombinedProblem::Combine(problems);
  if (!combined.ok()) return combined.status();
  // The combined pointer arrays live in host memory, which is what RunHost
  // reads; a device backend overrides this to move them.
  return on_device ? RunDevice(combined->problem())
                   : RunHost(combined->problem());
}

absl::StatusOr<std::vector<GemmRunInfo>> GemmBackend::RunList(
    const GemmList& list, bool on_device) {
  if (list.stream_order != nullptr) {
    return absl::FailedPreconditionError(
        "stream-ordered product lists need the CUDA backend");
  }
  // uint64_t elements: aligned for every operand's element type.
  std::vector<uint64_t> scratch(static_cast<size_t>(list.scratch_bytes + 7) /
                                8);
  const std::vector<GemmProblem> products = WithScratch(list, scratch.data());
  std::vector<GemmRunInfo> runs;
  runs.reserve(products.size());
  for (size_t i = 0; i < products.size(); ++i) {
    absl::StatusOr<GemmRunInfo> run =
        on_device ? RunDevice(products[i]) : RunHost(products[i]);
    if (!run.ok()) {
      return InProduct(i, run.status());
    }
    runs.push_back(*std::move(run));
  }
  return runs;
}

}  // namespace matmul
