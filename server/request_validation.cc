#include "server/request_validation.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/status_macros.h"

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
                                          bool is_output,
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
    case v1::Tensor::DATA_NOT_SET:
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": no data; set inline_data or a region reference"));
  }

  static_cast<StoredMatrix&>(checked) = ToStoredMatrix(dims, strides);
  checked.extent_bytes = extent_bytes;
  return checked;
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

}  // namespace

absl::StatusOr<MatmulPlan> ValidateRequest(const v1::MatmulRequest& request,
                                           const ValidationLimits& limits) {
  if (!request.has_a()) {
    return absl::InvalidArgumentError("missing operand A");
  }
  if (!request.has_b()) {
    return absl::InvalidArgumentError("missing operand B");
  }
  MatmulPlan plan;
  ASSIGN_OR_RETURN(plan.a, CheckTensor(request.a(), "A", false, limits));
  ASSIGN_OR_RETURN(plan.b, CheckTensor(request.b(), "B", false, limits));

  ASSIGN_OR_RETURN(plan.problem, ProductShape(request, plan.a, plan.b));
  GemmProblem& p = plan.problem;
  if (!std::isfinite(p.alpha) || !std::isfinite(p.beta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("alpha and beta must be finite; got alpha=", p.alpha,
                     " beta=", p.beta));
  }

  if (request.has_c()) {
    ASSIGN_OR_RETURN(plan.c, CheckTensor(request.c(), "C", true, limits));
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

  if (plan.c && plan.c->in_region) {  // written in place
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

}  // namespace matmul
