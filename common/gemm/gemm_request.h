// The part of turning a matmul.v1 request into a GemmProblem that the
// server (validating what it will run) and the client (recomputing what it
// asked for) share: the operands' shapes and strides as [batch, rows,
// cols], the transposes folded into op(A) and op(B), the batch broadcast,
// and alpha and beta with their defaults. Each side checks the tensors'
// bytes its own way first (inline data, regions, limits).
#ifndef MATMUL_COMMON_GEMM_GEMM_REQUEST_H_
#define MATMUL_COMMON_GEMM_GEMM_REQUEST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/gemm/gemm_problem.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

// A rank-2 or rank-3 tensor as it is stored (before any transpose), seen as
// [batch, rows, cols]: batch 1 for rank 2. Strides are in elements; the
// batch stride is 0 when there is one matrix, so that it broadcasts.
struct StoredMatrix {
  int64_t batch = 1;
  int64_t rows = 0;
  int64_t cols = 0;
  Strides strides;
};

// `dims` and `strides` (one per dimension, rank 2 or 3) as a StoredMatrix.
// The caller has checked the rank and that the strides match it.
StoredMatrix ToStoredMatrix(absl::Span<const int64_t> dims,
                            absl::Span<const int64_t> strides);

// The shape of the product `request` asks for, from its stored A and B:
// m, n, k and batch set, A's and B's strides with the request's transposes
// folded in (batch stride 0 for an operand that broadcasts), alpha and beta
// from the request or their defaults (1 and 0). Data pointers, C and
// c_dtype are left for the caller. INVALID_ARGUMENT when K of op(A) and
// op(B) differ, or when the batches differ and neither is 1.
absl::StatusOr<GemmProblem> ProductShape(const v1::MatmulRequest& request,
                                         const StoredMatrix& a,
                                         const StoredMatrix& b);

}  // namespace matmul

#endif  // MATMUL_COMMON_GEMM_GEMM_REQUEST_H_
