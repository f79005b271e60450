#include "common/gemm/gemm_request.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace matmul {
namespace {

// The strides of op(X) for an operand stored as `stored`: a transpose swaps
// the row and column strides. The batch stride is the broadcast product
// batch's concern and is set by the caller.
Strides OpStrides(const StoredMatrix& stored, bool transpose) {
  return {.batch = stored.strides.batch,
          .row = transpose ? stored.strides.col : stored.strides.row,
          .col = transpose ? stored.strides.row : stored.strides.col};
}

}  // namespace

StoredMatrix ToStoredMatrix(absl::Span<const int64_t> dims,
                            absl::Span<const int64_t> strides) {
  const size_t rank = dims.size();
  StoredMatrix stored;
  stored.batch = rank == 3 ? dims[0] : 1;
  stored.rows = dims[rank - 2];
  stored.cols = dims[rank - 1];
  stored.strides.batch = rank == 3 && dims[0] > 1 ? strides[0] : 0;
  stored.strides.row = strides[rank - 2];
  stored.strides.col = strides[rank - 1];
  return stored;
}

absl::StatusOr<GemmProblem> ProductShape(const v1::MatmulRequest& request,
                                         const StoredMatrix& a,
                                         const StoredMatrix& b) {
  GemmProblem p;
  const bool ta = request.transpose_a();
  const bool tb = request.transpose_b();
  p.m = ta ? a.cols : a.rows;
  p.k = ta ? a.rows : a.cols;
  const int64_t k_of_b = tb ? b.cols : b.rows;
  p.n = tb ? b.rows : b.cols;
  if (p.k != k_of_b) {
    return absl::InvalidArgumentError(
        absl::StrCat("inner dimensions disagree: op(A) is ", p.m, "x", p.k,
                     " and op(B) is ", k_of_b, "x", p.n, " (transpose_a=", ta,
                     ", transpose_b=", tb, "); K must match"));
  }
  // Every operand's batch must equal the product's or be 1 (broadcast).
  if (a.batch == b.batch || b.batch == 1) {
    p.batch = a.batch;
  } else if (a.batch == 1) {
    p.batch = b.batch;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("batch sizes disagree: A has ", a.batch, ", B has ",
                     b.batch, "; they must be equal or one of them 1"));
  }
  p.a.strides = OpStrides(a, ta);
  p.b.strides = OpStrides(b, tb);
  if (a.batch != p.batch) p.a.strides.batch = 0;
  if (b.batch != p.batch) p.b.strides.batch = 0;
  p.alpha = request.has_alpha() ? request.alpha() : 1.0f;
  p.beta = request.has_beta() ? request.beta() : 0.0f;
  return p;
}

}  // namespace matmul
