// Building matmul.v1 requests from host data and checking responses against
// the FP64 reference. Shared by matmul-cli and the integration tests, so a
// checked random product is two lines:
//
//   std::mt19937_64 rng(seed);
//   ASSIGN_OR_RETURN(v1::MatmulRequest request,
//                    MakeRandomRequest({.m = 127, .n = 255, .k = 63}, rng));
//   ...send it...
//   ASSIGN_OR_RETURN(double error, CheckResponse(request, response));
//
// Nothing here talks to a server.
#ifndef MATMUL_CLIENT_REQUEST_BUILDER_H_
#define MATMUL_CLIENT_REQUEST_BUILDER_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/gemm_request.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

// --- dtypes -----------------------------------------------------------------

v1::DType ToProtoDType(DType dtype);
// INVALID_ARGUMENT for DTYPE_UNSPECIFIED and unknown values.
absl::StatusOr<DType> FromProtoDType(v1::DType dtype);
// "bf16" / "fp32" (case-insensitive; "bfloat16", "float32" also accepted).
absl::StatusOr<DType> ParseDType(absl::string_view name);

// --- shapes -----------------------------------------------------------------

struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

// Parses "MxNxK" (e.g. "127x255x63"; 'X' also accepted): three positive
// integers. INVALID_ARGUMENT with the offending text otherwise.
absl::StatusOr<GemmShape> ParseGemmShape(absl::string_view text);

// --- tensors ----------------------------------------------------------------

// Number of elements a strided tensor spans: 1 + sum((shape[i]-1)*stride[i]),
// or 0 when any dimension is 0. `strides` empty means contiguous row-major.
// INVALID_ARGUMENT for negative dimensions or strides, a stride count that
// is not the rank, or a span that overflows int64.
absl::StatusOr<int64_t> StridedExtentElements(
    absl::Span<const int64_t> shape, absl::Span<const int64_t> strides);

// A Tensor with inline data: copies the bytes that shape and strides span
// (StridedExtentElements * element size) from `data`. Strides are written
// only when given (empty means contiguous row-major on the wire as well).
absl::StatusOr<v1::Tensor> MakeInlineTensor(
    DType dtype, absl::Span<const int64_t> shape, const void* data,
    absl::Span<const int64_t> strides = {});

// A bounds-checked view of an inline rank-2 or rank-3 tensor as
// [batch, rows, cols] (StoredMatrix: batch 1 for rank 2, batch stride 0 for
// a single matrix). `data` points into the Tensor's bytes, which must
// outlive the view.
struct InlineTensorView : StoredMatrix {
  DType dtype = DType::kBF16;
  const void* data = nullptr;
};
// INVALID_ARGUMENT when the tensor is not inline, its dtype or rank is bad,
// or its bytes do not cover the extent its shape and strides describe.
absl::StatusOr<InlineTensorView> ViewInlineTensor(const v1::Tensor& tensor);

// A matrix (or batch of matrices) in FP64, dense [batch, rows, cols].
struct HostMatrix {
  int64_t batch = 1;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<double> values;

  double at(int64_t b, int64_t row, int64_t col) const {
    return values[static_cast<size_t>((b * rows + row) * cols + col)];
  }
};
// Reads an inline tensor (any dtype, honouring strides) into FP64; this is
// how a response's C is turned into numbers.
absl::StatusOr<HostMatrix> ReadHostMatrix(const v1::Tensor& tensor);

// --- random problems --------------------------------------------------------

// Everything that describes one random product. Operands are filled with
// BF16 values uniform in [-1, 1]; C (when beta is set and nonzero) with
// values uniform in [-1, 1] in the output dtype.
struct ProblemSpec {
  int64_t m = 1;
  int64_t n = 1;
  int64_t k = 1;
  // 0: rank-2 operands. >= 1: rank-3 operands [batch, ., .].
  int64_t batch = 0;
  bool transpose_a = false;  // A is sent as [K, M]
  bool transpose_b = false;  // B is sent as [N, K] (nn.Linear)
  // Left unset on the wire when unset here (server defaults 1 and 0).
  std::optional<float> alpha = std::nullopt;
  std::optional<float> beta = std::nullopt;
  // Left unspecified on the wire when unset (server default: BF16).
  std::optional<DType> out_dtype = std::nullopt;
  // With batch >= 1: send one matrix for the whole batch, shape
  // [batch, ., .] with batch stride 0.
  bool broadcast_a = false;
  bool broadcast_b = false;
  // Padding added to the leading (row) stride of A and B, to exercise
  // non-contiguous operands; 0 sends contiguous tensors without strides.
  int64_t row_padding = 0;

  int64_t effective_batch() const { return batch > 0 ? batch : 1; }
  double flops() const { return 2.0 * effective_batch() * m * n * k; }
  DType resolved_out_dtype() const { return out_dtype.value_or(DType::kBF16); }
};

// "127x255x63:NT" plus ":b4", ":bcastA", ":alpha=..", ":fp32" as they apply;
// for test names and logs.
std::string ProblemSpecName(const ProblemSpec& spec);

// Builds a request with random inline operands (and C when beta != 0).
// Dimensions of 0 are allowed (the daemon rejects them; the tests check
// that). INVALID_ARGUMENT for negative values or an operand over 2 GiB.
// request_id is left 0.
absl::StatusOr<v1::MatmulRequest> MakeRandomRequest(const ProblemSpec& spec,
                                                    std::mt19937_64& rng);

// --- checking ---------------------------------------------------------------

// The product a request asks for, over the request's own host bytes: batch
// from the rank-3 operands (a batch of 1 or a rank-2 operand broadcasts),
// transposes folded into strides, alpha/beta defaults applied. When beta is
// nonzero, c points at the request's C (with its strides) so ReferenceGemm
// reads it; otherwise c.data is null and c.strides are dense [batch, m, n].
// The problem points into `request`, which must outlive it, and its C must
// only be read (the pointer is const-cast from the request's bytes).
absl::StatusOr<GemmProblem> GemmProblemFromRequest(
    const v1::MatmulRequest& request);

// The FP64 reference of a request, dense [batch, m, n].
absl::StatusOr<std::vector<double>> ReferenceResult(
    const v1::MatmulRequest& request);

// Recomputes `request` with ReferenceGemm and returns the relative error
// (||C - ref|| / ||ref||) of the response's C. INVALID_ARGUMENT when the
// request is malformed, FAILED_PRECONDITION when the response's C is absent
// or has the wrong dtype or shape.
absl::StatusOr<double> CheckResponse(const v1::MatmulRequest& request,
                                     const v1::MatmulResponse& response);

// Relative error that a correct product stays below: 1e-2 for BF16 output,
// 1e-4 for FP32. BF16 output carries ~2^-9 relative rounding per element
// (measured 1e-3 to 2e-3 against the CPU backend); FP32 output only the
// rounding of an FP32 sum over K (measured ~1e-7 for K up to 4096; the
// bound leaves room for other summation orders, e.g. split-K on a GPU).
double DefaultTolerance(DType out_dtype);

// The dtype a request's C has: out_dtype, else c's dtype, else BF16.
absl::StatusOr<DType> ResolvedOutDType(const v1::MatmulRequest& request);

}  // namespace matmul

#endif  // MATMUL_CLIENT_REQUEST_BUILDER_H_
