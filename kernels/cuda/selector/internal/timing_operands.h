// Private operands for timing a selector key: several copies of a
// canonical problem's operands on the device, filled with random non-zero
// values, so that consecutive timed runs read different memory where one
// copy would stay resident in L2. Pointer-array problems get device arrays
// of entry pointers, with the alignment all entries share.
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_TIMING_OPERANDS_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_TIMING_OPERANDS_H_

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/runtime/cuda_resources.h"

namespace matmul::cuda {

class TimingOperands {
 public:
  // Copies for `canonical` (see CanonicalProblem: dense strides, null
  // pointers; non-null a.pointers asks for pointer arrays) on `device`,
  // filled on `stream` and waited for.
  static absl::StatusOr<TimingOperands> Create(const GemmProblem& canonical,
                                               int device, cudaStream_t stream);

  // The problem over copy i (modulo the number of copies).
  const GemmProblem& problem(int i) const {
    return problems_[i % problems_.size()];
  }

 private:
  std::vector<DeviceBuffer> buffers_;
  std::vector<GemmProblem> problems_;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_TIMING_OPERANDS_H_
