#include "server/product/request_validation.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "kernels/gemm_list.h"

namespace matmul {
namespace {

using v1::DType_Name;

std::string ShapeString(const v1::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.shape(), ", "), "]");
}

absl::StatusOr<DType> CheckDType(v1::DType dtype, const std::string& name,
                                 bool output) {
  switch (dtype) {
    case v1::DTYPE_BF16:
      return DType::kBF16;
    case v1::DTYPE_FP32:
      if (output) return DType::kFP32;
      return absl::InvalidArgumentError(absl::StrCat(
          name,
          ": dtype DTYPE_FP32 is not supported for inputs; expected "
          "DTYPE_BF16"));
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": dtype is unspecified; expected ",
                       output ? "DTYPE_BF16 or DTYPE_FP32" : "DTYPE_BF16"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": unknown dtype ", static_cast<int>(dtype)));
  }
}

// Checks that distinct elements of a tensor never share an address, which an
// output needs: sorted by stride, each dimension must step past everything
// the smaller ones span.
absl::Status CheckNoSelfOverlap(const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& strides,
                                const std::string& name) {
  std::vector<size_t> order;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] > 1) order.push_back(i);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return strides[x] < strides[y]; });
  int64_t span = 0;  // largest offset reachable with the dims seen so far
  for (size_t i : order) {
    if (strides[i] <= span) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": strides [", absl::StrJoin(strides, ", "),
          "] make elements overlap; an output needs distinct addresses for "
          "every element"));
    }
    span += (dims[i] - 1) * strides[i];  // cannot overflow: checked earlier
  }
  return absl::OkStatus();
}

// Validates shape, strides and inline bytes of one tensor.
absl::StatusOr<CheckedTensor> CheckTensor(const v1::Tensor& tensor,
                                          const std::string& name,
                                          bool is_output, bool listed,
                                          const ValidationLimits& limits) {
  CheckedTensor checked;
  if (is_output) {
    ASSIGN_OR_RETURN(checked.dtype, CheckDType(tensor.dtype(), name, true));
  } else {
    ASSIGN_OR_RETURN(checked.dtype, CheckDType(tensor.dtype(), name, false));
  }
  const int rank = tensor.shape_size();
  if (rank != 2 && rank != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": rank ", rank, " (shape ", ShapeString(tensor),
        "); expected rank 2 [rows, cols] or 3 [batch, rows, cols]"));
  }
  std::vector<int64_t> dims(tensor.shape().begin(), tensor.shape().end());
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 1 || dims[i] > limits.max_dimension) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": dimension ", i, " is ", dims[i], " (shape ",
          ShapeString(tensor), "); expected 1 to ", limits.max_dimension));
    }
  }
  const int64_t esize = static_cast<int64_t>(DTypeSize(checked.dtype));
  std::vector<int64_t> strides;
  if (tensor.strides_size() == 0) {
    strides.assign(rank, 1);
    for (int i = rank - 2; i >= 0; --i) {
      if (MulOverflows(strides[i + 1], dims[i + 1], &strides[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": shape ", ShapeString(tensor), " overflows 64 bits"));
      }
    }
  } else {
    if (tensor.strides_size() != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": ", tensor.strides_size(), " strides for rank ", rank,
          "; expected one stride per dimension, or none for row-major"));
    }
    strides.assign(tensor.strides().begin(), tensor.strides().end());
    for (int i = 0; i < rank; ++i) {
      if (strides[i] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": stride ", i, " is ", strides[i],
                         "; strides must be >= 0"));
      }
    }
  }
  // Extent: 1 + sum((dim - 1) * stride) elements, then bytes.
  int64_t last = 0;
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    int64_t step;
    if (MulOverflows(dims[i] - 1, strides[i], &step) ||
        AddOverflows(last, step, &last) ||
        MulOverflows(elements, dims[i], &elements)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": shape ", ShapeString(tensor), " with strides [",
                       absl::StrJoin(strides, ", "), "] overflows 64 bits"));
    }
  }
  int64_t extent_bytes;
  int64_t element_bytes;
  if (AddOverflows(last, 1, &extent_bytes) ||
      MulOverflows(extent_bytes, esize, &extent_bytes) ||
      MulOverflows(elements, esize, &element_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": size overflows 64 bits"));
  }
  if (extent_bytes > limits.max_tensor_bytes ||
      element_bytes > limits.max_tensor_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name, ": ", std::max(extent_bytes, element_bytes),
        " bytes exceeds the per-tensor limit of ", limits.max_tensor_bytes));
  }
  if (is_output) RETURN_IF_ERROR(CheckNoSelfOverlap(dims, strides, name));

  switch (tensor.data_case()) {
    case v1::Tensor::kInlineData: {
      const int64_t given = static_cast<int64_t>(tensor.inline_data().size());
      if (tensor.strides_size() == 0 && given != extent_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": inline_data has ", given, " bytes; expected ",
                         extent_bytes, " (shape ", ShapeString(tensor), " x ",
                         esize, " bytes)"));
      }
      if (given < extent_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": strides [", absl::StrJoin(strides, ", "),
            "] reach outside the data: shape ", ShapeString(tensor), " spans ",
            extent_bytes, " bytes but inline_data has ", given));
      }
      break;
    }
    case v1::Tensor::kRegion:
      // Bounds against the region are checked when it is looked up.
      if (tensor.region().region_id().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": region reference without a region_id"));
      }
      if (tensor.region().offset_bytes() % esize != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": region offset ", tensor.region().offset_bytes(),
            " is not a multiple of the element size ", esize));
      }
      checked.in_region = true;
      checked.region_id = tensor.region().region_id();
      checked.offset_bytes = tensor.region().offset_bytes();
      break;
    case v1::Tensor::kScratch:
      // Which product's scratch, and bounds, are the list's to check.
      if (!listed) {
        return absl::InvalidArgumentError(
            absl::StrCat(name,
                         ": a scratch operand outside a product list; scratch "
                         "exists only in MatmulRequest.products"));
      }
      if (tensor.scratch().offset_bytes() % esize != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": scratch offset ", tensor.scratch().offset_bytes(),
            " is not a multiple of the element size ", esize));
      }
      checked.in_scratch = true;
      checked.scratch_product = tensor.scratch().product();
      checked.offset_bytes = tensor.scratch().offset_bytes();
      break;
    case v1::Tensor::DATA_NOT_SET:
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": no data; set inline_data or a region reference"));
  }

  static_cast<StoredMatrix&>(checked) = ToStoredMatrix(dims, strides);
  checked.extent_bytes = extent_bytes;
  return checked;
}

// The words of a stream order: where they are, and the numbering.
absl::Status CheckStreamOrderWords(const v1::StreamOrder& order) {
  if (order.region_id().empty()) {
    return absl::InvalidArgumentError(
        "stream_order.region_id is empty; name the shm region that holds "
        "the wait and signal words");
  }
  if (order.wait_offset_bytes() % 4 != 0 ||
      (order.signal() && order.signal_offset_bytes() % 4 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream_order: the wait word (offset ", order.wait_offset_bytes(),
        ") and the signal word (offset ", order.signal_offset_bytes(),
        ") must be 4-byte aligned"));
  }
  if (order.answered_below() > order.number()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream_order.answered_below (", order.answered_below(),
        ") is above its number (", order.number(),
        "); expected at most the number (0 with an unnumbered product)"));
  }
  return absl::OkStatus();
}

// A stream-ordered product runs where the client's GPU work put its
// operands, and its output is read there: every operand is in a region.
absl::Status CheckStreamOrder(const v1::StreamOrder& order,
                              const MatmulPlan& plan) {
  if (!plan.a.in_region || !plan.b.in_region || !plan.c || !plan.c->in_region) {
    return absl::InvalidArgumentError(
        "stream_order needs A, B and C all in regions (the product runs "
        "where the client's stream left them)");
  }
  return CheckStreamOrderWords(order);
}

absl::StatusOr<MatmulPlan> ValidateProduct(const v1::MatmulRequest& request,
                                           const ValidationLimits& limits,
                                           bool listed) {
  if (!request.has_a()) {
    return absl::InvalidArgumentError("missing operand A");
  }
  if (!request.has_b()) {
    return absl::InvalidArgumentError("missing operand B");
  }
  MatmulPlan plan;
  ASSIGN_OR_RETURN(plan.a,
                   CheckTensor(request.a(), "A", false, listed, limits));
  ASSIGN_OR_RETURN(plan.b,
                   CheckTensor(request.b(), "B", false, listed, limits));

  ASSIGN_OR_RETURN(plan.problem, ProductShape(request, plan.a, plan.b));
  GemmProblem& p = plan.problem;
  if (!std::isfinite(p.alpha) || !std::isfinite(p.beta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("alpha and beta must be finite; got alpha=", p.alpha,
                     " beta=", p.beta));
  }

  if (request.has_c()) {
    ASSIGN_OR_RETURN(plan.c,
                     CheckTensor(request.c(), "C", true, listed, limits));
    const CheckedTensor& c = *plan.c;
    const int64_t c_batch = request.c().shape_size() == 3 ? c.batch : 1;
    if (c.rows != p.m || c.cols != p.n || c_batch != p.batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("C: shape ", ShapeString(request.c()), "; expected ",
                       p.batch > 1 ? absl::StrCat("[", p.batch, ", ") : "[",
                       p.m, ", ", p.n, "]"));
    }
  } else if (p.beta != 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "beta is ", p.beta, " but the request has no C; send C or beta=0"));
  }

  if (request.out_dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(p.c_dtype,
                     CheckDType(request.out_dtype(), "out_dtype", true));
    if (plan.c && plan.c->dtype != p.c_dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "C: dtype ", DType_Name(request.c().dtype()),
          " differs from out_dtype ", DType_Name(request.out_dtype())));
    }
  } else {
    p.c_dtype = plan.c ? plan.c->dtype : DType::kBF16;
  }

  if (request.has_stream_order()) {
    RETURN_IF_ERROR(CheckStreamOrder(request.stream_order(), plan));
  }

  if (plan.c && (plan.c->in_region || plan.c->in_scratch)) {  // in place
    plan.output_in_region = true;
    p.c.strides = plan.c->strides;
    return plan;
  }
  // The response carries C inline and densely.
  int64_t output_elements;
  if (MulOverflows(p.batch, p.m, &output_elements) ||
      MulOverflows(output_elements, p.n, &output_elements) ||
      MulOverflows(output_elements, static_cast<int64_t>(DTypeSize(p.c_dtype)),
                   &plan.output_bytes)) {
    return absl::InvalidArgumentError("output size overflows 64 bits");
  }
  if (plan.output_bytes > limits.max_message_bytes ||
      plan.output_bytes > limits.max_tensor_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the result would be ", plan.output_bytes,
        " bytes inline, over the limit of ",
        std::min(limits.max_message_bytes, limits.max_tensor_bytes), " bytes"));
  }
  p.c.strides = {p.batch > 1 ? p.m * p.n : 0, p.n, 1};
  return plan;
}

// The parts of a list item that belong to the whole list, or to no list.
absl::Status CheckListItem(const v1::MatmulRequest& item) {
  if (!item.session_id().empty() || item.has_stream_order() ||
      item.request_id() != 0 || item.products_size() != 0) {
    return absl::InvalidArgumentError(
        "session_id, stream_order, request_id and products belong to the "
        "list's request, not to its products; leave them unset here");
  }
  if (!item.has_c()) {
    return absl::InvalidArgumentError(
        "no C: a product of a list writes its output in a region or in "
        "scratch (a list returns nothing inline)");
  }
  const v1::Tensor* operands[] = {&item.a(), &item.b(), &item.c()};
  const char* names[] = {"A", "B", "C"};
  for (int i = 0; i < 3; ++i) {
    if (operands[i]->data_case() == v1::Tensor::kInlineData) {
      return absl::InvalidArgumentError(absl::StrCat(
          names[i],
          ": inline data in a product list; every operand of a list is in "
          "a region of the session or in scratch"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MatmulPlan> ValidateRequest(const v1::MatmulRequest& request,
                                           const ValidationLimits& limits) {
  return ValidateProduct(request, limits, /*listed=*/false);
}

absl::StatusOr<ListPlan> ValidateList(const v1::MatmulRequest& request,
                                      const ValidationLimits& limits) {
  const int count = request.products_size();
  if (count > limits.max_list_products) {
    return absl::InvalidArgumentError(
        absl::StrCat("the list has ", count, " products; at most ",
                     limits.max_list_products, " are accepted in one list"));
  }
  if (request.has_a() || request.has_b() || request.has_c() ||
      request.transpose_a() || request.transpose_b() || request.has_alpha() ||
      request.has_beta() || request.out_dtype() != v1::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "a request with products leaves its own a, b, c, transposes, alpha, "
        "beta and out_dtype unset; each product carries its own");
  }
  if (request.has_stream_order()) {
    RETURN_IF_ERROR(CheckStreamOrderWords(request.stream_order()));
  }
  ListPlan list;
  list.products.reserve(count);
  list.buffer_start.assign(count, -1);
  list.buffer_bytes.assign(count, 0);
  // Reads `t` of product i (A, B, or C with beta) from scratch: what an
  // earlier product wrote, within its buffer.
  auto check_scratch = [&](size_t i, const CheckedTensor& t,
                           const char* name) -> absl::Status {
    const uint32_t j = t.scratch_product;
    if (j >= i) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": reads the scratch of product ", j,
          ", which has not run yet; a product reads only the output of an "
          "earlier product (0 to ",
          i == 0 ? std::string("none") : absl::StrCat(i - 1), ")"));
    }
    if (list.buffer_start[j] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": reads the scratch of product ", j,
                       ", whose output is not in scratch"));
    }
    const uint64_t size = static_cast<uint64_t>(list.buffer_bytes[j]);
    if (t.offset_bytes > size ||
        static_cast<uint64_t>(t.extent_bytes) > size - t.offset_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": bytes [", t.offset_bytes, ", +", t.extent_bytes,
                       ") reach outside the scratch of product ", j, " (", size,
                       " bytes): the shapes do not chain"));
    }
    return absl::OkStatus();
  };
  for (int index = 0; index < count; ++index) {
    const size_t i = static_cast<size_t>(index);
    const v1::MatmulRequest& item = request.products(index);
    if (absl::Status status = CheckListItem(item); !status.ok()) {
      return InProduct(i, status);
    }
    absl::StatusOr<MatmulPlan> plan =
        ValidateProduct(item, limits, /*listed=*/true);
    if (!plan.ok()) return InProduct(i, plan.status());
    for (const auto& [t, name] :
         {std::pair{&plan->a, "A"}, std::pair{&plan->b, "B"}}) {
      if (!t->in_scratch) continue;
      if (absl::Status status = check_scratch(i, *t, name); !status.ok()) {
        return InProduct(i, status);
      }
    }
    const CheckedTensor& c = *plan->c;
    if (c.in_scratch && c.scratch_product == i) {  // a new buffer
      if (item.c().strides_size() != 0 || c.offset_bytes != 0 ||
          plan->problem.beta != 0.0f) {
        return InProduct(
            i, absl::InvalidArgumentError(
                   "C: a new scratch buffer is contiguous (no strides), at "
                   "offset 0, and starts undefined (beta = 0); accumulate "
                   "into an earlier product's scratch instead"));
      }
      const int64_t start = (list.scratch_bytes + kScratchAlignment - 1) /
                            kScratchAlignment * kScratchAlignment;
      if (c.extent_bytes > limits.max_list_scratch_bytes - start) {
        return InProduct(
            i, absl::InvalidArgumentError(absl::StrCat(
                   "C: scratch of ", c.extent_bytes, " bytes at byte ", start,
                   " takes the list past its bound of ",
                   limits.max_list_scratch_bytes, " bytes of scratch")));
      }
      list.buffer_start[i] = start;
      list.buffer_bytes[i] = c.extent_bytes;
      list.scratch_bytes = start + c.extent_bytes;
    } else if (c.in_scratch) {  // into an earlier product's buffer
      if (absl::Status status = check_scratch(i, c, "C"); !status.ok()) {
        return InProduct(i, status);
      }
      list.buffer_start[i] = list.buffer_start[c.scratch_product];
      list.buffer_bytes[i] = list.buffer_bytes[c.scratch_product];
    }
    list.products.push_back(*std::move(plan));
  }
  return list;
}

}  // namespace matmul
