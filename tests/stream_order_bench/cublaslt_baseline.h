// stream-order-bench's baseline: cuBLASLt on the same operands in the same
// process, as a local caller would run it. Every candidate of cuBLASLt's
// heuristic top-k (32 MiB of workspace on sm_90 and later) is timed back to
// back with CUDA events, as matmul-bench times them, and the fastest is the
// one the benchmark then runs.
#ifndef MATMUL_TESTS_STREAM_ORDER_BENCH_CUBLASLT_BASELINE_H_
#define MATMUL_TESTS_STREAM_ORDER_BENCH_CUBLASLT_BASELINE_H_

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/families/cublaslt_gemm.h"
#include "kernels/cuda/runtime/cuda_resources.h"

namespace matmul::stream_order_bench {

class CublasLtBaseline {
 public:
  // Picks the fastest candidate for `problem` (its pointers set; the
  // operands must outlive this object) on `device`, timing on `stream`.
  // NOT_FOUND when no candidate runs.
  static absl::StatusOr<std::unique_ptr<CublasLtBaseline>> Create(
      int device, const GemmProblem& problem, cudaStream_t stream);

  // Queues one product with the chosen candidate on `stream`.
  absl::Status Queue(cudaStream_t stream) const;

  // cuBLASLt's id of the chosen algorithm, and its index in the top-k.
  int algo_id() const { return plan_->algo_id(algo_index_); }
  int algo_index() const { return algo_index_; }
  int candidates() const { return plan_->algo_count(); }

 private:
  CublasLtBaseline(std::unique_ptr<cuda::CublasLtGemm> gemm,
                   const GemmProblem& problem, cuda::DeviceBuffer workspace)
      : gemm_(std::move(gemm)),
        problem_(problem),
        workspace_(std::move(workspace)) {}

  std::unique_ptr<cuda::CublasLtGemm> gemm_;
  const GemmProblem problem_;
  cuda::DeviceBuffer workspace_;
  std::shared_ptr<const cuda::CublasLtPlan> plan_;
  int algo_index_ = 0;
};

}  // namespace matmul::stream_order_bench

#endif  // MATMUL_TESTS_STREAM_ORDER_BENCH_CUBLASLT_BASELINE_H_
