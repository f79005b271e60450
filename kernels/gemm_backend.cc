#include "kernels/gemm_backend.h"

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

}  // namespace matmul
