#include "common/gemm/shape_name.h"

#include "absl/strings/str_cat.h"
#include "common/gemm/matrix_layout.h"

namespace matmul {

std::string ShapeName(const GemmProblem& problem) {
  std::string name = absl::StrCat(problem.m, "x", problem.n, "x", problem.k,
                                  ":", std::string(1, LayoutTagA(problem)),
                                  std::string(1, LayoutTagB(problem)));
  if (problem.batch > 1) absl::StrAppend(&name, ":b", problem.batch);
  return name;
}

}  // namespace matmul
