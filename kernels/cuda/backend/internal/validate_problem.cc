#include "kernels/cuda/backend/internal/validate_problem.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"

namespace matmul::cuda {

absl::Status ValidateForCuda(const GemmProblem& p) {
  if (p.batch < 1 || p.m < 1 || p.n < 1 || p.k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch, m, n and k must be >= 1; got batch ", p.batch,
                     ", m ", p.m, ", n ", p.n, ", k ", p.k));
  }
  int64_t product = 0;
  if (MulOverflows(p.m, p.k, &product) ||
      MulOverflows(product, p.batch, &product) ||
      MulOverflows(p.k, p.n, &product) ||
      MulOverflows(product, p.batch, &product) ||
      MulOverflows(p.m, p.n, &product) ||
      MulOverflows(product, p.batch, &product) ||
      MulOverflows(product, 4, &product)) {
    return absl::InvalidArgumentError("problem size overflows int64");
  }
  struct Operand {
    const char* name;
    const void* data;
    const void* pointers;
    Strides strides;
  };
  const Operand operands[] = {{"A", p.a.data, p.a.pointers, p.a.strides},
                              {"B", p.b.data, p.b.pointers, p.b.strides},
                              {"C", p.c.data, p.c.pointers, p.c.strides}};
  for (const Operand& x : operands) {
    if (x.data == nullptr && x.pointers == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("operand ", x.name, " has no data pointer"));
    }
    if (x.strides.batch < 0 || x.strides.row < 0 || x.strides.col < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "operand ", x.name, " has a negative stride (batch ", x.strides.batch,
          ", row ", x.strides.row, ", col ", x.strides.col, ")"));
    }
  }
  if (p.batch > 1 && p.c.pointers == nullptr && p.c.strides.batch == 0) {
    return absl::InvalidArgumentError(
        "output C cannot have batch stride 0 (every batch entry would write "
        "the same matrix)");
  }
  return absl::OkStatus();
}

}  // namespace matmul::cuda
