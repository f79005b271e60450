#include "client/product_list.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/request_builder.h"
#include "common/status_macros.h"

namespace matmul {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Checks one operand of product `index` on its own; `made_scratch[j]` says
// whether product j < index made a scratch buffer (its C was scratch{j}).
absl::Status CheckOperand(const ListOperand& operand, const char* name,
                          uint32_t index, bool is_c,
                          const std::vector<bool>& made_scratch) {
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("product ", index, ": ", name, ": ", parts...));
  };
  const bool in_region = !operand.region_id.empty();
  const bool in_scratch = operand.scratch_product.has_value();
  if (in_region == in_scratch) {
    return error(in_region ? "both a region and scratch"
                           : "neither a region nor scratch (a list returns "
                             "nothing inline)");
  }
  if (operand.shape.size() != 2 && operand.shape.size() != 3) {
    return error("shape ", ShapeText(operand.shape),
                 " must be [rows, cols] or [batch, rows, cols]");
  }
  for (int64_t dim : operand.shape) {
    if (dim < 1) return error("shape ", ShapeText(operand.shape));
  }
  if (!operand.strides.empty() &&
      operand.strides.size() != operand.shape.size()) {
    return error(operand.strides.size(), " strides for rank ",
                 operand.shape.size());
  }
  if (!is_c && operand.dtype != DType::kBF16) {
    return error("inputs are bf16, not ", DTypeName(operand.dtype));
  }
  if (in_scratch) {
    const uint32_t maker = *operand.scratch_product;
    if (maker > index || (maker == index && !is_c)) {
      return error("scratch of product ", maker,
                   ", which has not run before it");
    }
    if (maker < index && !made_scratch[maker]) {
      return error("scratch of product ", maker,
                   ", whose C is not a new scratch buffer");
    }
  }
  return absl::OkStatus();
}

void FillTensor(const ListOperand& operand, v1::Tensor& tensor) {
  tensor.set_dtype(ToProtoDType(operand.dtype));
  for (int64_t dim : operand.shape) tensor.add_shape(dim);
  for (int64_t stride : operand.strides) tensor.add_strides(stride);
  if (operand.scratch_product.has_value()) {
    tensor.mutable_scratch()->set_product(*operand.scratch_product);
    tensor.mutable_scratch()->set_offset_bytes(operand.offset_bytes);
  } else {
    tensor.mutable_region()->set_region_id(operand.region_id);
    tensor.mutable_region()->set_offset_bytes(operand.offset_bytes);
  }
}

// Rows and columns of a rank-2 or rank-3 operand, transposed when asked.
std::pair<int64_t, int64_t> Matrix(const ListOperand& operand, bool transpose) {
  const size_t rank = operand.shape.size();
  const int64_t rows = operand.shape[rank - 2];
  const int64_t cols = operand.shape[rank - 1];
  return transpose ? std::make_pair(cols, rows) : std::make_pair(rows, cols);
}

absl::Status CheckRank2(const ListOperand& operand, const std::string& name) {
  if (operand.shape.size() == 2) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "LoRA operands are rank 2 (flatten a batch into rows): ", name,
      " has shape ", ShapeText(operand.shape)));
}

absl::Status CheckLoraWeights(const LoraWeights& weights, size_t index) {
  const std::string prefix = absl::StrCat("projection ", index, ": ");
  RETURN_IF_ERROR(CheckRank2(weights.w, prefix + "W"));
  RETURN_IF_ERROR(CheckRank2(weights.a, prefix + "A"));
  return CheckRank2(weights.b, prefix + "B");
}

}  // namespace

ListOperand ListOperand::InRegion(std::string region_id, uint64_t offset_bytes,
                                  std::vector<int64_t> shape, DType dtype) {
  ListOperand operand;
  operand.region_id = std::move(region_id);
  operand.offset_bytes = offset_bytes;
  operand.shape = std::move(shape);
  operand.dtype = dtype;
  return operand;
}

ListOperand ListOperand::InScratch(uint32_t product, uint64_t offset_bytes,
                                   std::vector<int64_t> shape, DType dtype) {
  ListOperand operand;
  operand.scratch_product = product;
  operand.offset_bytes = offset_bytes;
  operand.shape = std::move(shape);
  operand.dtype = dtype;
  return operand;
}

ProductList::ProductList(std::string session_id)
    : session_id_(std::move(session_id)) {}

uint32_t ProductList::Add(ListOperand a, ListOperand b, ListOperand c,
                          ListProductOptions options) {
  products_.push_back(
      Product{std::move(a), std::move(b), std::move(c), options});
  return size() - 1;
}

absl::StatusOr<v1::MatmulRequest> ProductList::Build() const {
  if (products_.empty()) {
    return absl::InvalidArgumentError("a product list needs a product");
  }
  v1::MatmulRequest request;
  request.set_session_id(session_id_);
  if (stream_order_.has_value())
    *request.mutable_stream_order() = *stream_order_;
  std::vector<bool> made_scratch(products_.size(), false);
  for (uint32_t i = 0; i < size(); ++i) {
    const Product& product = products_[i];
    RETURN_IF_ERROR(CheckOperand(product.a, "A", i, false, made_scratch));
    RETURN_IF_ERROR(CheckOperand(product.b, "B", i, false, made_scratch));
    RETURN_IF_ERROR(CheckOperand(product.c, "C", i, true, made_scratch));
    const ListProductOptions& options = product.options;
    if (product.c.scratch_product == i) {
      // A new buffer starts undefined: nothing to read, and the daemon
      // lays it out dense from its start.
      if (product.c.offset_bytes != 0 || !product.c.strides.empty() ||
          options.beta.value_or(0) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "product ", i,
            ": C: a new scratch buffer is dense at offset 0 with beta 0"));
      }
      made_scratch[i] = true;
    }
    const auto [m, k] = Matrix(product.a, options.transpose_a);
    const auto [k_b, n] = Matrix(product.b, options.transpose_b);
    const auto [c_rows, c_cols] = Matrix(product.c, false);
    if (k != k_b || c_rows != m || c_cols != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "product ", i, ": shapes do not multiply: op(A) [", m, ", ", k,
          "], op(B) [", k_b, ", ", n, "], C [", c_rows, ", ", c_cols, "]"));
    }

    v1::MatmulRequest& item = *request.add_products();
    FillTensor(product.a, *item.mutable_a());
    FillTensor(product.b, *item.mutable_b());
    FillTensor(product.c, *item.mutable_c());
    item.set_transpose_a(options.transpose_a);
    item.set_transpose_b(options.transpose_b);
    if (options.alpha.has_value()) item.set_alpha(*options.alpha);
    if (options.beta.has_value()) item.set_beta(*options.beta);
    item.set_out_dtype(ToProtoDType(product.c.dtype));
  }
  return request;
}

absl::Status AddLoraForward(
    ProductList& list, const ListOperand& x,
    absl::Span<const LoraForwardProjection> projections) {
  if (projections.empty()) {
    return absl::InvalidArgumentError("a LoRA forward needs a projection");
  }
  RETURN_IF_ERROR(CheckRank2(x, "x"));
  for (size_t p = 0; p < projections.size(); ++p) {
    const LoraForwardProjection& projection = projections[p];
    RETURN_IF_ERROR(CheckLoraWeights(projection.weights, p));
    RETURN_IF_ERROR(
        CheckRank2(projection.xa, absl::StrCat("projection ", p, ": xa")));
    RETURN_IF_ERROR(
        CheckRank2(projection.y, absl::StrCat("projection ", p, ": y")));
  }
  for (const LoraForwardProjection& projection : projections) {
    const LoraWeights& weights = projection.weights;
    list.Add(x, weights.a, projection.xa, {.transpose_b = true});
    ListProductOptions base = {.transpose_b = true};
    if (projection.y_holds_bias) base.beta = 1;
    list.Add(x, weights.w, projection.y, base);
    list.Add(projection.xa, weights.b, projection.y,
             {.transpose_b = true, .alpha = weights.scale, .beta = 1});
  }
  return absl::OkStatus();
}

absl::Status AddLoraBackward(
    ProductList& list, const ListOperand& x,
    absl::Span<const LoraBackwardProjection> projections,
    const std::optional<ListOperand>& dx) {
  if (projections.empty()) {
    return absl::InvalidArgumentError("a LoRA backward needs a projection");
  }
  RETURN_IF_ERROR(CheckRank2(x, "x"));
  if (dx.has_value()) RETURN_IF_ERROR(CheckRank2(*dx, "dx"));
  for (size_t p = 0; p < projections.size(); ++p) {
    const LoraBackwardProjection& projection = projections[p];
    RETURN_IF_ERROR(CheckLoraWeights(projection.weights, p));
    const std::string prefix = absl::StrCat("projection ", p, ": ");
    RETURN_IF_ERROR(CheckRank2(projection.xa, prefix + "xa"));
    RETURN_IF_ERROR(CheckRank2(projection.dy, prefix + "dy"));
    RETURN_IF_ERROR(CheckRank2(projection.da, prefix + "dA"));
    RETURN_IF_ERROR(CheckRank2(projection.db, prefix + "dB"));
  }
  bool dx_written = false;
  for (const LoraBackwardProjection& projection : projections) {
    const LoraWeights& weights = projection.weights;
    // t = dy B stays in the daemon: dA and dx read it, the client never
    // does.
    const std::vector<int64_t> t_shape = {projection.dy.shape[0],
                                          weights.b.shape[1]};
    const uint32_t t_product =
        list.Add(projection.dy, weights.b, list.NewScratch(t_shape));
    const ListOperand t = ListOperand::InScratch(t_product, 0, t_shape);
    list.Add(projection.dy, projection.xa, projection.db,
             {.transpose_a = true, .alpha = weights.scale});
    list.Add(t, x, projection.da,
             {.transpose_a = true, .alpha = weights.scale});
    if (!dx.has_value()) continue;
    ListProductOptions base;
    if (dx_written) base.beta = 1;  // the sum over projections sharing x
    list.Add(projection.dy, weights.w, *dx, base);
    list.Add(t, weights.a, *dx, {.alpha = weights.scale, .beta = 1});
    dx_written = true;
  }
  return absl::OkStatus();
}

}  // namespace matmul
