// ValidateRequest on any serialized MatmulRequest: it must return, never
// crash or overflow, and what it accepts must be self-consistent: every
// element of op(A), op(B) and C lies inside the bytes it checked, and the
// shapes agree. A request with products goes through ValidateList too:
// what it accepts keeps every operand in a region or inside scratch that
// an earlier product (or, for a new C, the product itself) laid out,
// within the list's bounds.
#include <cstddef>
#include <cstdint>

#include "kernels/gemm_list.h"
#include "matmul/v1/matmul.pb.h"
#include "server/product/request_validation.h"
#include "tests/fuzz/fuzz_check.h"

namespace matmul {
namespace {

void CheckOperand(const CheckedTensor& tensor, const v1::Tensor& proto,
                  const ValidationLimits& limits) {
  FUZZ_CHECK(tensor.batch >= 1 && tensor.batch <= limits.max_dimension);
  FUZZ_CHECK(tensor.rows >= 1 && tensor.rows <= limits.max_dimension);
  FUZZ_CHECK(tensor.cols >= 1 && tensor.cols <= limits.max_dimension);
  FUZZ_CHECK(tensor.strides.batch >= 0 && tensor.strides.row >= 0 &&
             tensor.strides.col >= 0);
  FUZZ_CHECK(tensor.extent_bytes > 0 &&
             tensor.extent_bytes <= limits.max_tensor_bytes);
  const __int128 last =
      fuzz::LastElement(tensor.batch, tensor.rows, tensor.cols, tensor.strides);
  FUZZ_CHECK((last + 1) * DTypeSize(tensor.dtype) <= tensor.extent_bytes);
  if (tensor.in_region) {
    FUZZ_CHECK(proto.has_region());
    FUZZ_CHECK(!tensor.region_id.empty());
    FUZZ_CHECK(tensor.offset_bytes % DTypeSize(tensor.dtype) == 0);
  } else {
    FUZZ_CHECK(proto.data_case() == v1::Tensor::kInlineData);
    FUZZ_CHECK(static_cast<int64_t>(proto.inline_data().size()) >=
               tensor.extent_bytes);
  }
}

// op(X) as the backends read it: [batch, rows, cols] with the problem's
// strides must stay inside the operand's checked extent.
void CheckProblemOperand(int64_t batch, int64_t rows, int64_t cols,
                         const Strides& strides, const CheckedTensor& tensor,
                         size_t element_bytes) {
  const __int128 last = fuzz::LastElement(batch, rows, cols, strides);
  FUZZ_CHECK(last >= 0);
  FUZZ_CHECK((last + 1) * element_bytes <= tensor.extent_bytes);
}

void Check(const v1::MatmulRequest& request, const ValidationLimits& limits) {
  absl::StatusOr<MatmulPlan> plan = ValidateRequest(request, limits);
  if (!plan.ok()) {
    FUZZ_CHECK(!plan.status().message().empty());
    return;
  }
  const GemmProblem& p = plan->problem;
  FUZZ_CHECK(p.m >= 1 && p.n >= 1 && p.k >= 1 && p.batch >= 1);
  FUZZ_CHECK(p.batch <= limits.max_dimension);
  CheckOperand(plan->a, request.a(), limits);
  CheckOperand(plan->b, request.b(), limits);
  FUZZ_CHECK(plan->a.batch == p.batch || plan->a.batch == 1);
  FUZZ_CHECK(plan->b.batch == p.batch || plan->b.batch == 1);
  CheckProblemOperand(p.batch, p.m, p.k, p.a.strides, plan->a, 2);
  CheckProblemOperand(p.batch, p.k, p.n, p.b.strides, plan->b, 2);
  if (plan->c) {
    CheckOperand(*plan->c, request.c(), limits);
    FUZZ_CHECK(plan->c->rows == p.m && plan->c->cols == p.n);
    FUZZ_CHECK(plan->c->dtype == p.c_dtype);
  } else {
    FUZZ_CHECK(p.beta == 0.0f);
  }
  if (plan->output_in_region) {
    FUZZ_CHECK(plan->c && plan->c->in_region);
    CheckProblemOperand(p.batch, p.m, p.n, p.c.strides, *plan->c,
                        DTypeSize(p.c_dtype));
  } else {
    const __int128 dense = __int128{p.batch} * p.m * p.n * DTypeSize(p.c_dtype);
    FUZZ_CHECK(dense == plan->output_bytes);
    FUZZ_CHECK(plan->output_bytes <= limits.max_message_bytes);
    FUZZ_CHECK(fuzz::LastElement(p.batch, p.m, p.n, p.c.strides) + 1 ==
               __int128{p.batch} * p.m * p.n);
  }
}

void CheckList(const v1::MatmulRequest& request,
               const ValidationLimits& limits) {
  absl::StatusOr<ListPlan> list = ValidateList(request, limits);
  if (!list.ok()) {
    FUZZ_CHECK(!list.status().message().empty());
    return;
  }
  const size_t count = list->products.size();
  FUZZ_CHECK(count == static_cast<size_t>(request.products_size()));
  FUZZ_CHECK(count >= 1 &&
             count <= static_cast<size_t>(limits.max_list_products));
  FUZZ_CHECK(list->scratch_bytes >= 0 &&
             list->scratch_bytes <= limits.max_list_scratch_bytes);
  for (size_t i = 0; i < count; ++i) {
    const MatmulPlan& plan = list->products[i];
    FUZZ_CHECK(plan.c.has_value() && plan.output_in_region);
    for (const CheckedTensor* t : {&plan.a, &plan.b, &*plan.c}) {
      FUZZ_CHECK(t->in_region != t->in_scratch);
      if (!t->in_scratch) continue;
      const size_t j = t->scratch_product;
      FUZZ_CHECK(j < i || (t == &*plan.c && j == i));
      const int64_t start = list->buffer_start[j];
      const int64_t bytes = list->buffer_bytes[j];
      FUZZ_CHECK(start >= 0 && start % kScratchAlignment == 0);
      FUZZ_CHECK(start + bytes <= list->scratch_bytes);
      FUZZ_CHECK(static_cast<int64_t>(t->offset_bytes) + t->extent_bytes <=
                 bytes);
    }
  }
}

}  // namespace
}  // namespace matmul

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  matmul::fuzz::QuietProtobufLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  matmul::v1::MatmulRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  // The daemon's defaults (the overflow checks at full range) and small
  // limits (the refusals at their edges).
  matmul::Check(request, matmul::ValidationLimits{});
  matmul::ValidationLimits small;
  small.max_dimension = 64;
  small.max_tensor_bytes = 1 << 16;
  small.max_message_bytes = 1 << 14;
  matmul::Check(request, small);
  if (request.products_size() > 0) {
    matmul::CheckList(request, matmul::ValidationLimits{});
    small.max_list_products = 4;
    small.max_list_scratch_bytes = 1 << 12;
    matmul::CheckList(request, small);
  }
  return 0;
}
