// Turns a MatmulRequest into a checked GemmProblem description before any
// work is queued: dtypes, ranks, dimensions, strides, byte lengths, batch
// broadcast and sizes, all with overflow-safe arithmetic. Every failure is an
// absl::Status whose message names the operand, what was wrong and what was
// expected.
#ifndef MATMUL_SERVER_PRODUCT_REQUEST_VALIDATION_H_
#define MATMUL_SERVER_PRODUCT_REQUEST_VALIDATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/gemm_request.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

struct ValidationLimits {
  int64_t max_dimension = int64_t{1} << 24;  // M, N, K and batch each
  int64_t max_tensor_bytes = int64_t{4} << 30;
  int64_t max_message_bytes = int64_t{256} << 20;  // bounds the inline result
  int max_list_products = 32;                      // products in a list
  int64_t max_list_scratch_bytes = int64_t{256} << 20;  // scratch of a list
};

// A tensor that passed validation, as stored (before any transpose).
struct CheckedTensor : StoredMatrix {
  DType dtype = DType::kBF16;
  int64_t extent_bytes = 0;  // 1 + the largest element offset, in bytes
  // Set when the data sits in a registered region rather than inline.
  bool in_region = false;
  std::string region_id;
  // Set when the data sits in a product list's scratch: the buffer of
  // product `scratch_product` (ScratchRef).
  bool in_scratch = false;
  uint32_t scratch_product = 0;
  uint64_t offset_bytes = 0;  // in the region, or in the scratch buffer
};

// A request that passed validation. `problem` has every field but the data
// pointers set: op(A)/op(B) strides with transposes folded in, and C either
// as the dense [batch, M, N] output the response carries inline or, when
// the request's C is a region, with C's own strides (written in place).
struct MatmulPlan {
  GemmProblem problem;
  CheckedTensor a;
  CheckedTensor b;
  std::optional<CheckedTensor> c;  // the initial C, when the request has one
  bool output_in_region = false;
  int64_t output_bytes = 0;  // of the inline output; 0 when in a region
};

absl::StatusOr<MatmulPlan> ValidateRequest(const v1::MatmulRequest& request,
                                           const ValidationLimits& limits);

// A product list (MatmulRequest.products) that passed validation: each
// product's plan, and the list's scratch laid out as one block in which
// every buffer starts at a multiple of kScratchAlignment.
struct ListPlan {
  std::vector<MatmulPlan> products;
  // Per product: where the scratch buffer its C is in starts in the block,
  // and that buffer's bytes; -1 and 0 for a C in a region.
  std::vector<int64_t> buffer_start;
  std::vector<int64_t> buffer_bytes;
  int64_t scratch_bytes = 0;
};

// Validates a request with `products` whole: every product as
// ValidateRequest would, with the errors prefixed "product i: ", and what
// a list adds: at most limits.max_list_products products, C always given,
// every operand in a region or in scratch, scratch read only after an
// earlier product wrote it and within what it wrote, at most
// limits.max_list_scratch_bytes of scratch, and the request's own operands
// and options left unset. INVALID_ARGUMENT for all of these.
absl::StatusOr<ListPlan> ValidateList(const v1::MatmulRequest& request,
                                      const ValidationLimits& limits);

}  // namespace matmul

#endif  // MATMUL_SERVER_PRODUCT_REQUEST_VALIDATION_H_
