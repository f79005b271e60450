// The name a product's shape goes by in logs, errors and metric labels.
#ifndef MATMUL_COMMON_GEMM_SHAPE_NAME_H_
#define MATMUL_COMMON_GEMM_SHAPE_NAME_H_

#include <string>

#include "common/gemm/gemm_problem.h"

namespace matmul {

// "MxNxK" with the operands' layout tags, e.g. "5120x2048x2048:NT", and
// ":bB" for a batch of B (bounded metric labels are built from this
// elsewhere).
std::string ShapeName(const GemmProblem& problem);

}  // namespace matmul

#endif  // MATMUL_COMMON_GEMM_SHAPE_NAME_H_
