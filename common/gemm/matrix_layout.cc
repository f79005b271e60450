#include "common/gemm/matrix_layout.h"

namespace matmul {

MatrixLayout ClassifyLayout(const Strides& s, int64_t rows, int64_t cols) {
  const bool row_ok = (cols == 1 || s.col == 1) && (rows == 1 || s.row >= cols);
  const bool col_ok = (rows == 1 || s.row == 1) && (cols == 1 || s.col >= rows);
  // Both hold only for a single row or column: the strides decide, and
  // row-major where they do not.
  if (row_ok && (s.col == 1 || s.row != 1 || !col_ok)) {
    return {MatrixOrder::kRowMajor, rows == 1 ? cols : s.row};
  }
  if (col_ok) return {MatrixOrder::kColMajor, cols == 1 ? rows : s.col};
  return {MatrixOrder::kStrided, 0};
}

char LayoutTag(MatrixOrder order) {
  switch (order) {
    case MatrixOrder::kRowMajor:
      return 'N';
    case MatrixOrder::kColMajor:
      return 'T';
    case MatrixOrder::kStrided:
      return 'S';
  }
  return 'S';
}

char LayoutTagA(const GemmProblem& p) {
  return LayoutTag(ClassifyLayout(p.a.strides, p.m, p.k).order);
}

char LayoutTagB(const GemmProblem& p) {
  return LayoutTag(ClassifyLayout(p.b.strides, p.k, p.n).order);
}

}  // namespace matmul
