// What every CUDA path needs of a GemmProblem before any GPU work.
#ifndef MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_VALIDATE_PROBLEM_H_
#define MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_VALIDATE_PROBLEM_H_

#include "absl/status/status.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::cuda {

// Validates what every CUDA path needs (sizes >= 1, operands present,
// non-negative strides, no broadcast output, int64 sizes that do not
// overflow); INVALID_ARGUMENT with a message that says what was wrong.
absl::Status ValidateForCuda(const GemmProblem& problem);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_VALIDATE_PROBLEM_H_
