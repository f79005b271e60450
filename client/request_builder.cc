#include "client/request_builder.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/bf16.h"
#include "common/checked_math.h"
#include "common/gemm/reference_gemm.h"
#include "common/status_macros.h"

namespace matmul {
namespace {

// Protobuf refuses messages of 2 GiB or more, so no operand can be larger.
constexpr int64_t kMaxInlineBytes = std::numeric_limits<int32_t>::max();

// A quiet BF16 NaN written into the padding of strided operands: a server
// that reads padding produces NaN, which RelativeError reports as infinite.
constexpr uint16_t kBf16PaddingNan = 0x7fc0;

// Row-major element strides of a dense tensor; overflow is not possible once
// StridedExtentElements has accepted the shape's product.
std::vector<int64_t> DenseStrides(absl::Span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

void StoreElement(void* base, DType dtype, int64_t offset, float value) {
  if (dtype == DType::kBF16) {
    uint16_t bits = FloatToBf16(value);
    std::memcpy(static_cast<char*>(base) + offset * 2, &bits, sizeof(bits));
  } else {
    std::memcpy(static_cast<char*>(base) + offset * 4, &value, sizeof(value));
  }
}

// A random tensor of `matrices` matrices of [rows, cols] (rank 3 when
// `rank3`, with shape[0] = `batch`). `matrices` is 1 for a broadcast
// operand (batch stride 0) and `batch` otherwise. `row_padding` extra
// elements per row are filled with NaN.
absl::StatusOr<v1::Tensor> MakeRandomTensor(DType dtype, bool rank3,
                                            int64_t batch, bool broadcast,
                                            int64_t rows, int64_t cols,
                                            int64_t row_padding,
                                            std::mt19937_64& rng) {
  std::vector<int64_t> shape;
  if (rank3) shape.push_back(batch);
  shape.push_back(rows);
  shape.push_back(cols);
  std::vector<int64_t> strides;
  if (broadcast || row_padding > 0) {
    int64_t row_stride = cols + row_padding;
    int64_t matrix_stride = 0;
    if (!broadcast && MulOverflows(rows, row_stride, &matrix_stride)) {
      return absl::InvalidArgumentError("operand size overflows int64");
    }
    if (rank3) strides.push_back(matrix_stride);
    strides.push_back(row_stride);
    strides.push_back(1);
  }
  ASSIGN_OR_RETURN(int64_t extent, StridedExtentElements(shape, strides));
  int64_t bytes = 0;
  if (MulOverflows(extent, static_cast<int64_t>(DTypeSize(dtype)), &bytes) ||
      bytes > kMaxInlineBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "operand of shape [", absl::StrJoin(shape, ", "),
        "] is too large to send inline (limit ", kMaxInlineBytes, " bytes)"));
  }

  v1::Tensor tensor;
  tensor.set_dtype(ToProtoDType(dtype));
  for (int64_t dim : shape) tensor.add_shape(dim);
  for (int64_t stride : strides) tensor.add_strides(stride);
  std::string* data = tensor.mutable_inline_data();
  data->resize(static_cast<size_t>(bytes));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < extent; ++i) {
    StoreElement(data->data(), dtype, i, uniform(rng));
  }
  if (row_padding > 0) {
    float padding_value = Bf16ToFloat(kBf16PaddingNan);
    int64_t row_stride = cols + row_padding;
    for (int64_t offset = cols; offset < extent; offset += row_stride) {
      for (int64_t j = 0; j < row_padding && offset + j < extent; ++j) {
        StoreElement(data->data(), dtype, offset + j, padding_value);
      }
    }
  }
  return tensor;
}

}  // namespace

v1::DType ToProtoDType(DType dtype) {
  return dtype == DType::kBF16 ? v1::DTYPE_BF16 : v1::DTYPE_FP32;
}

absl::StatusOr<DType> FromProtoDType(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_BF16:
      return DType::kBF16;
    case v1::DTYPE_FP32:
      return DType::kFP32;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported dtype ", v1::DType_Name(dtype), " (",
          static_cast<int>(dtype), "); expected DTYPE_BF16 or DTYPE_FP32"));
  }
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  if (lower == "bf16" || lower == "bfloat16") return DType::kBF16;
  if (lower == "fp32" || lower == "float32" || lower == "f32") {
    return DType::kFP32;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\"; expected bf16 or fp32"));
}

absl::StatusOr<GemmShape> ParseGemmShape(absl::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, absl::ByAnyChar("xX"));
  GemmShape shape;
  int64_t* dims[] = {&shape.m, &shape.n, &shape.k};
  bool ok = parts.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) {
    ok = absl::SimpleAtoi(parts[i], dims[i]) && *dims[i] > 0;
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid shape \"", text,
                     "\": expected MxNxK with three positive integers, e.g. "
                     "127x255x63"));
  }
  return shape;
}

absl::StatusOr<int64_t> StridedExtentElements(
    absl::Span<const int64_t> shape, absl::Span<const int64_t> strides) {
  if (!strides.empty() && strides.size() != shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", strides.size(), " strides for a tensor of rank ",
                     shape.size(), "; expected none or one per dimension"));
  }
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "negative dimension in shape [", absl::StrJoin(shape, ", "), "]"));
    }
  }
  for (int64_t stride : strides) {
    if (stride < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "negative stride in strides [", absl::StrJoin(strides, ", "), "]"));
    }
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  if (strides.empty()) {
    int64_t elements = 1;
    for (int64_t dim : shape) {
      if (MulOverflows(elements, dim, &elements)) {
        return absl::InvalidArgumentError(
            absl::StrCat("shape [", absl::StrJoin(shape, ", "),
                         "] overflows int64 elements"));
      }
    }
    return elements;
  }
  int64_t last = 0;  // offset of the last element
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t term = 0;
    if (MulOverflows(shape[i] - 1, strides[i], &term) ||
        AddOverflows(last, term, &last)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shape [", absl::StrJoin(shape, ", "), "] with strides [",
          absl::StrJoin(strides, ", "), "] overflows int64 elements"));
    }
  }
  if (AddOverflows(last, 1, &last)) {
    return absl::InvalidArgumentError("tensor extent overflows int64");
  }
  return last;
}

absl::StatusOr<v1::Tensor> MakeInlineTensor(DType dtype,
                                            absl::Span<const int64_t> shape,
                                            const void* data,
                                            absl::Span<const int64_t> strides) {
  ASSIGN_OR_RETURN(int64_t extent, StridedExtentElements(shape, strides));
  int64_t bytes = 0;
  if (MulOverflows(extent, static_cast<int64_t>(DTypeSize(dtype)), &bytes) ||
      bytes > kMaxInlineBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor of ", extent,
                     " elements is too large to send "
                     "inline (limit ",
                     kMaxInlineBytes, " bytes)"));
  }
  if (bytes > 0 && data == nullptr) {
    return absl::InvalidArgumentError("null data for a non-empty tensor");
  }
  v1::Tensor tensor;
  tensor.set_dtype(ToProtoDType(dtype));
  for (int64_t dim : shape) tensor.add_shape(dim);
  for (int64_t stride : strides) tensor.add_strides(stride);
  tensor.mutable_inline_data()->assign(static_cast<const char*>(data),
                                       static_cast<size_t>(bytes));
  return tensor;
}

absl::StatusOr<InlineTensorView> ViewInlineTensor(const v1::Tensor& tensor) {
  if (tensor.data_case() != v1::Tensor::kInlineData) {
    return absl::InvalidArgumentError(
        tensor.data_case() == v1::Tensor::kRegion
            ? "tensor refers to a region; only inline tensors can be read "
              "on the client"
            : "tensor has no data");
  }
  ASSIGN_OR_RETURN(DType dtype, FromProtoDType(tensor.dtype()));
  const int rank = tensor.shape_size();
  if (rank != 2 && rank != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor of rank ", rank, "; expected 2 or 3"));
  }
  std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
  std::vector<int64_t> strides(tensor.strides().begin(),
                               tensor.strides().end());
  ASSIGN_OR_RETURN(int64_t extent, StridedExtentElements(shape, strides));
  const uint64_t expected_bytes =
      static_cast<uint64_t>(extent) * DTypeSize(dtype);
  if (tensor.inline_data().size() != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inline tensor of shape [", absl::StrJoin(shape, ", "),
        "] and strides [", absl::StrJoin(strides, ", "), "] has ",
        tensor.inline_data().size(), " bytes; expected ", expected_bytes));
  }
  if (strides.empty()) strides = DenseStrides(shape);

  InlineTensorView view;
  static_cast<StoredMatrix&>(view) = ToStoredMatrix(shape, strides);
  view.dtype = dtype;
  view.data = tensor.inline_data().data();
  return view;
}

absl::StatusOr<HostMatrix> ReadHostMatrix(const v1::Tensor& tensor) {
  ASSIGN_OR_RETURN(InlineTensorView view, ViewInlineTensor(tensor));
  // ReadOutput already reads any dtype with any strides; borrow it.
  GemmProblem problem;
  problem.batch = view.batch;
  problem.m = view.rows;
  problem.n = view.cols;
  problem.c.data = const_cast<void*>(view.data);
  problem.c.strides = view.strides;
  problem.c_dtype = view.dtype;
  HostMatrix matrix;
  matrix.batch = view.batch;
  matrix.rows = view.rows;
  matrix.cols = view.cols;
  matrix.values = ReadOutput(problem);
  return matrix;
}

std::string ProblemSpecName(const ProblemSpec& spec) {
  std::string name =
      absl::StrCat(spec.m, "x", spec.n, "x", spec.k, ":",
                   spec.transpose_a ? "T" : "N", spec.transpose_b ? "T" : "N");
  if (spec.batch > 0) absl::StrAppend(&name, ":b", spec.batch);
  if (spec.broadcast_a) absl::StrAppend(&name, ":bcastA");
  if (spec.broadcast_b) absl::StrAppend(&name, ":bcastB");
  if (spec.row_padding > 0) absl::StrAppend(&name, ":pad", spec.row_padding);
  if (spec.alpha.has_value()) absl::StrAppend(&name, ":alpha=", *spec.alpha);
  if (spec.beta.has_value()) absl::StrAppend(&name, ":beta=", *spec.beta);
  if (spec.out_dtype.has_value()) {
    absl::StrAppend(&name, ":", DTypeName(*spec.out_dtype));
  }
  return name;
}

absl::StatusOr<v1::MatmulRequest> MakeRandomRequest(const ProblemSpec& spec,
                                                    std::mt19937_64& rng) {
  if (spec.m < 0 || spec.n < 0 || spec.k < 0 || spec.batch < 0 ||
      spec.row_padding < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative size in problem ", ProblemSpecName(spec)));
  }
  const bool rank3 = spec.batch > 0;
  const int64_t batch = spec.effective_batch();
  v1::MatmulRequest request;
  ASSIGN_OR_RETURN(
      *request.mutable_a(),
      MakeRandomTensor(DType::kBF16, rank3, batch, rank3 && spec.broadcast_a,
                       spec.transpose_a ? spec.k : spec.m,
                       spec.transpose_a ? spec.m : spec.k, spec.row_padding,
                       rng));
  ASSIGN_OR_RETURN(
      *request.mutable_b(),
      MakeRandomTensor(DType::kBF16, rank3, batch, rank3 && spec.broadcast_b,
                       spec.transpose_b ? spec.n : spec.k,
                       spec.transpose_b ? spec.k : spec.n, spec.row_padding,
                       rng));
  request.set_transpose_a(spec.transpose_a);
  request.set_transpose_b(spec.transpose_b);
  if (spec.alpha.has_value()) request.set_alpha(*spec.alpha);
  if (spec.beta.has_value()) request.set_beta(*spec.beta);
  if (spec.out_dtype.has_value()) {
    request.set_out_dtype(ToProtoDType(*spec.out_dtype));
  }
  if (spec.beta.value_or(0.0f) != 0.0f) {
    ASSIGN_OR_RETURN(*request.mutable_c(),
                     MakeRandomTensor(spec.resolved_out_dtype(), rank3, batch,
                                      /*broadcast=*/false, spec.m, spec.n,
                                      /*row_padding=*/0, rng));
  }
  return request;
}

absl::StatusOr<DType> ResolvedOutDType(const v1::MatmulRequest& request) {
  if (request.out_dtype() != v1::DTYPE_UNSPECIFIED) {
    return FromProtoDType(request.out_dtype());
  }
  if (request.has_c() && request.c().dtype() != v1::DTYPE_UNSPECIFIED) {
    return FromProtoDType(request.c().dtype());
  }
  return DType::kBF16;
}

absl::StatusOr<GemmProblem> GemmProblemFromRequest(
    const v1::MatmulRequest& request) {
  if (!request.has_a() || !request.has_b()) {
    return absl::InvalidArgumentError("request lacks operand A or B");
  }
  ASSIGN_OR_RETURN(InlineTensorView a, ViewInlineTensor(request.a()));
  ASSIGN_OR_RETURN(InlineTensorView b, ViewInlineTensor(request.b()));
  if (a.dtype != DType::kBF16 || b.dtype != DType::kBF16) {
    return absl::InvalidArgumentError("operands A and B must be BF16");
  }

  // Transposes folded into the strides, batch broadcast, alpha and beta:
  // as the server reads the request.
  ASSIGN_OR_RETURN(GemmProblem problem, ProductShape(request, a, b));
  problem.a.data = a.data;
  problem.b.data = b.data;
  ASSIGN_OR_RETURN(problem.c_dtype, ResolvedOutDType(request));
  problem.c.strides = {
      .batch = problem.m * problem.n, .row = problem.n, .col = 1};
  if (problem.beta != 0.0f) {
    if (!request.has_c()) {
      return absl::InvalidArgumentError("beta != 0 requires C");
    }
    ASSIGN_OR_RETURN(InlineTensorView c, ViewInlineTensor(request.c()));
    if (c.dtype != problem.c_dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("C is ", DTypeName(c.dtype), " but the output is ",
                       DTypeName(problem.c_dtype)));
    }
    if (c.rows != problem.m || c.cols != problem.n ||
        (c.batch != problem.batch && c.batch != 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "C is [", c.batch, ", ", c.rows, ", ", c.cols, "]; expected [",
          problem.batch, ", ", problem.m, ", ", problem.n, "]"));
    }
    // ReferenceGemm only reads C; OutputMatrix simply has no const variant.
    problem.c.data = const_cast<void*>(c.data);
    problem.c.strides = c.strides;
    if (c.batch != problem.batch) problem.c.strides.batch = 0;
  }
  return problem;
}

absl::StatusOr<std::vector<double>> ReferenceResult(
    const v1::MatmulRequest& request) {
  ASSIGN_OR_RETURN(GemmProblem problem, GemmProblemFromRequest(request));
  return ReferenceGemm(problem);
}

absl::StatusOr<double> CheckResponse(const v1::MatmulRequest& request,
                                     const v1::MatmulResponse& response) {
  ASSIGN_OR_RETURN(GemmProblem problem, GemmProblemFromRequest(request));
  if (!response.has_c()) {
    return absl::FailedPreconditionError("response has no C");
  }
  absl::StatusOr<InlineTensorView> c = ViewInlineTensor(response.c());
  if (!c.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("response C is malformed: ", c.status().message()));
  }
  if (c->dtype != problem.c_dtype) {
    return absl::FailedPreconditionError(
        absl::StrCat("response C is ", DTypeName(c->dtype), "; expected ",
                     DTypeName(problem.c_dtype)));
  }
  if (c->batch != problem.batch || c->rows != problem.m ||
      c->cols != problem.n) {
    return absl::FailedPreconditionError(absl::StrCat(
        "response C is [", c->batch, ", ", c->rows, ", ", c->cols,
        "]; expected [", problem.batch, ", ", problem.m, ", ", problem.n, "]"));
  }
  std::vector<double> expected = ReferenceGemm(problem);
  GemmProblem output = problem;
  output.c.data = const_cast<void*>(c->data);
  output.c.strides = c->strides;
  return RelativeError(ReadOutput(output), expected);
}

double DefaultTolerance(DType out_dtype) {
  return out_dtype == DType::kBF16 ? 1e-2 : 1e-4;
}

}  // namespace matmul
