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
  static std::unique_ptr<GemmBackend> Create();

  std::string name() const override { return "cpu"; }
  std::vector<DeviceInfo> devices() const override;
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override;

 private:
  CpuBackend() = default;
};

}  // namespace matmul

#endif  // MATMUL_KERNELS_CPU_CPU_BACKEND_H_
