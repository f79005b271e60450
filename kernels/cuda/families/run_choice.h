// Running a kernel the selector chose: whoever holds a KernelChoice (the
// backend's schedule, the selector's timer, the tools) runs it here, on its
// family, without going back through the selector.
#ifndef MATMUL_KERNELS_CUDA_FAMILIES_RUN_CHOICE_H_
#define MATMUL_KERNELS_CUDA_FAMILIES_RUN_CHOICE_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "common/gemm/gemm_problem.h"
#include "kernels/cuda/families/gemm_family.h"
#include "kernels/cuda/runtime/cuda_resources.h"

namespace matmul::cuda {

// Runs `choice` on `problem` (device pointers) on `stream`; grows
// `workspace` to what the kernel asks for first.
absl::Status RunChoice(const KernelChoice& choice, const GemmProblem& problem,
                       cudaStream_t stream, DeviceBuffer& workspace);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_FAMILIES_RUN_CHOICE_H_
