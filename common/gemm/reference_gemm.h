// A plain FP64 GEMM over host memory: the reference every backend, the CLI's
// --check and the tests compare against. Slow on purpose: no blocking, no
// reordering of the K sum beyond what double precision makes irrelevant.
#ifndef MATMUL_COMMON_GEMM_REFERENCE_GEMM_H_
#define MATMUL_COMMON_GEMM_REFERENCE_GEMM_H_

#include <vector>

#include "common/gemm/gemm_problem.h"

namespace matmul {

// Returns alpha * A * B + beta * C in FP64, laid out [batch, m, n] densely.
// C is read (in its dtype) only when beta != 0. Pointer arrays are honoured.
std::vector<double> ReferenceGemm(const GemmProblem& problem);

// Reads the output C of `problem` (its dtype and strides) as FP64, laid out
// [batch, m, n] densely, to compare with ReferenceGemm.
std::vector<double> ReadOutput(const GemmProblem& problem);

// ||actual - expected||_2 / ||expected||_2 (or the absolute norm when the
// expected norm is 0). Any NaN or infinity in `actual` yields infinity.
double RelativeError(const std::vector<double>& actual,
                     const std::vector<double>& expected);

}  // namespace matmul

#endif  // MATMUL_COMMON_GEMM_REFERENCE_GEMM_H_
