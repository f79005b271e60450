#include "tests/stream_order_bench/cublaslt_baseline.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/gemm/shape_name.h"
#include "common/status_macros.h"
#include "kernels/cuda/runtime/cuda_status.h"

namespace matmul::stream_order_bench {
namespace {

// Each candidate: one untimed run, then this many trials of this many runs
// back to back between two events; its time is the median trial's.
constexpr int kTrials = 3;
constexpr int kRunsPerTrial = 10;

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLtBaseline>> CublasLtBaseline::Create(
    int device, const GemmProblem& problem, cudaStream_t stream) {
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CublasLtGemm> gemm,
                   cuda::CublasLtGemm::Create(device));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer workspace,
                   cuda::DeviceBuffer::Create(gemm->workspace_bytes()));
  auto baseline = std::unique_ptr<CublasLtBaseline>(
      new CublasLtBaseline(std::move(gemm), problem, std::move(workspace)));
  ASSIGN_OR_RETURN(baseline->plan_, baseline->gemm_->GetPlan(problem));
  ASSIGN_OR_RETURN(cuda::CudaEvent start, cuda::CudaEvent::Create());
  ASSIGN_OR_RETURN(cuda::CudaEvent stop, cuda::CudaEvent::Create());

  double best_seconds = std::numeric_limits<double>::infinity();
  int best_index = -1;
  absl::Status last_error = absl::NotFoundError("cuBLASLt offers no candidate");
  for (int index = 0; index < baseline->plan_->algo_count(); ++index) {
    baseline->algo_index_ = index;
    // A candidate that does not run (too much workspace, a launch error)
    // is left out rather than failing the benchmark.
    absl::Status ran = baseline->Queue(stream);
    if (ran.ok()) {
      ran = cuda::CudaStatus(cudaStreamSynchronize(stream),
                             "cudaStreamSynchronize (cuBLASLt candidate)");
    }
    if (!ran.ok()) {
      last_error = std::move(ran);
      continue;
    }
    std::vector<double> trials;
    for (int trial = 0; trial < kTrials; ++trial) {
      RETURN_IF_ERROR(start.Record(stream));
      for (int run = 0; run < kRunsPerTrial; ++run) {
        RETURN_IF_ERROR(baseline->Queue(stream));
      }
      RETURN_IF_ERROR(stop.Record(stream));
      RETURN_IF_ERROR(stop.Synchronize());
      ASSIGN_OR_RETURN(double seconds,
                       cuda::CudaEvent::ElapsedSeconds(start, stop));
      trials.push_back(seconds / kRunsPerTrial);
    }
    std::sort(trials.begin(), trials.end());
    const double median = trials[trials.size() / 2];
    if (median < best_seconds) {
      best_seconds = median;
      best_index = index;
    }
  }
  if (best_index < 0) {
    return absl::NotFoundError(absl::StrCat("no cuBLASLt candidate runs for ",
                                            ShapeName(problem), ": ",
                                            last_error.message()));
  }
  baseline->algo_index_ = best_index;
  return baseline;
}

absl::Status CublasLtBaseline::Queue(cudaStream_t stream) const {
  return gemm_->Run(*plan_, algo_index_, problem_, stream, workspace_.data(),
                    workspace_.size());
}

}  // namespace matmul::stream_order_bench
