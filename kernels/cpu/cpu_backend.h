// The CPU backend: BF16 operands widened to FP32 in K-blocks, multiplied by
// OpenBLAS sgemm into an FP32 accumulator, then scaled and narrowed with
// round-to-nearest-even. The default on machines without a GPU and the
// reference the GPU backend is tested against.
#ifndef MATMUL_KERNELS_CPU_CPU_BACKEND_H_
#define MATMUL_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "kernels/gemm_backend.h"

namespace matmul {

class CpuBackend final : public GemmBackend {
 public:
  // `threads_per_product`: OpenBLAS threads each product uses (a process-
  // wide OpenBLAS setting); 0 leaves OpenBLAS's default (all cores). With
  // several products at once, cores / concurrent products avoids
  // oversubscription: OpenBLAS threads spin while they wait, and on a small
  // machine they starve everything else, gRPC's threads included.
  static std::unique_ptr<GemmBackend> Create(int threads_per_product = 0);

  std::string name() const override { return "cpu"; }
  std::vector<DeviceInfo> devices() const override;
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override;

 private:
  CpuBackend() = default;
};

}  // namespace matmul

#endif  // MATMUL_KERNELS_CPU_CPU_BACKEND_H_
