#include "common/gemm/gemm_problem.h"

#include "absl/strings/str_cat.h"

namespace matmul {
namespace {

// "N" when the operand is stored row-major (unit column stride), "T" when it
// is stored column-major (the transposed case), "S" for any other stride.
char LayoutTag(const Strides& strides) {
  if (strides.col == 1) return 'N';
  if (strides.row == 1) return 'T';
  return 'S';
}

}  // namespace

std::string ShapeName(const GemmProblem& problem) {
  std::string name =
      absl::StrCat(problem.m, "x", problem.n, "x", problem.k, ":",
                   std::string(1, LayoutTag(problem.a.strides)),
                   std::string(1, LayoutTag(problem.b.strides)));
  if (problem.batch > 1) absl::StrAppend(&name, ":b", problem.batch);
  return name;
}

}  // namespace matmul
