// How one operand of a GemmProblem sits in memory, by the one rule every
// part of the project uses: row-major (unit column stride, 'N'),
// column-major (unit row stride, 'T', the transposed case), or strided
// ('S', which kernels take only after packing).
//
// A dimension of extent 1 makes its stride irrelevant, so a single row or
// column can be read either way. It classifies as the order its strides
// literally say (a unit column stride: row-major; else a unit row stride:
// column-major), and row-major where they say neither. The leading dimension is
// the non-unit stride, or the extent of the other dimension where that stride
// is irrelevant.
#ifndef MATMUL_COMMON_GEMM_MATRIX_LAYOUT_H_
#define MATMUL_COMMON_GEMM_MATRIX_LAYOUT_H_

#include <cstdint>

#include "common/gemm/gemm_problem.h"

namespace matmul {

enum class MatrixOrder { kRowMajor, kColMajor, kStrided };

struct MatrixLayout {
  MatrixOrder order = MatrixOrder::kStrided;
  int64_t ld = 0;  // leading dimension; 0 when strided
};

// The layout of a rows x cols operand with these strides.
MatrixLayout ClassifyLayout(const Strides& strides, int64_t rows, int64_t cols);

// 'N', 'T' or 'S' for row-major, column-major or strided.
char LayoutTag(MatrixOrder order);

// The tag of each operand of a problem: A is m x k, B is k x n, C is m x n.
char LayoutTagA(const GemmProblem& problem);
char LayoutTagB(const GemmProblem& problem);

}  // namespace matmul

#endif  // MATMUL_COMMON_GEMM_MATRIX_LAYOUT_H_
