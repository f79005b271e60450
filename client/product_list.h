// Product lists (MatmulRequest.products): several products that the daemon
// runs in order on one of its streams, as one request, where a later
// product reads what an earlier one wrote and may accumulate into it. One
// round trip and one hand-off of the GPU between the client's kernels and
// the daemon's instead of one per product: what makes a LoRA layer's
// three products (or a backward's five) cheap through the daemon.
//
//   ProductList list(session->session_id());
//   ListOperand x = ListOperand::InRegion(region->id(), 0, {m, k});
//   ...
//   list.Add(x, w, y, {.transpose_b = true});          // y = x W^T
//   list.Add(xa, b, y, {.transpose_b = true, .alpha = s, .beta = 1});
//   ASSIGN_OR_RETURN(v1::MatmulRequest request, list.Build());
//   ASSIGN_OR_RETURN(v1::MatmulResponse response, client->Matmul(request));
//
// Every operand lies in a region of the session or in the list's scratch
// (daemon memory that lives as long as the list); nothing comes back
// inline. AddLoraForward / AddLoraBackward append the products of LoRA
// layers, the same lists the Python client sends. Nothing here talks to a
// server.
#ifndef MATMUL_CLIENT_PRODUCT_LIST_H_
#define MATMUL_CLIENT_PRODUCT_LIST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/gemm/gemm_problem.h"
#include "matmul/v1/matmul.pb.h"

namespace matmul {

// Where an operand of a listed product lies and what it is: in a region of
// the session (region_id set), or in the scratch buffer that product
// `scratch_product` of the same list made (see v1::ScratchRef).
struct ListOperand {
  std::string region_id;
  std::optional<uint32_t> scratch_product;
  uint64_t offset_bytes = 0;     // in the region, or in the scratch buffer
  std::vector<int64_t> shape;    // [rows, cols] or [batch, rows, cols]
  std::vector<int64_t> strides;  // elements, one per dimension; empty: dense
  DType dtype = DType::kBF16;

  static ListOperand InRegion(std::string region_id, uint64_t offset_bytes,
                              std::vector<int64_t> shape,
                              DType dtype = DType::kBF16);
  // As C of product `product` itself (offset 0, dense): a new buffer of
  // this shape; as A or B of a later product: a view of that buffer.
  static ListOperand InScratch(uint32_t product, uint64_t offset_bytes,
                               std::vector<int64_t> shape,
                               DType dtype = DType::kBF16);
};

// What a product does with its operands: C = alpha * op(A) * op(B) + beta *
// C. Unset alpha and beta stay unset on the wire (the daemon's 1 and 0).
struct ListProductOptions {
  bool transpose_a = false;  // A is [K, M]
  bool transpose_b = false;  // B is [N, K] (nn.Linear's weight)
  std::optional<float> alpha = std::nullopt;
  std::optional<float> beta = std::nullopt;
};

// Builds one list request. Add never fails; Build checks the list whole
// (the same rules the daemon applies to structure and shapes, so that a
// mistake shows up with the product's index before a round trip) and
// returns the request.
class ProductList {
 public:
  explicit ProductList(std::string session_id);

  // Appends C = alpha * op(A) * op(B) + beta * C; C's dtype is the
  // product's output dtype. Returns the product's index, which
  // ListOperand::InScratch names.
  uint32_t Add(ListOperand a, ListOperand b, ListOperand c,
               ListProductOptions options = {});

  // C for the product that the next Add appends: a new scratch buffer.
  ListOperand NewScratch(std::vector<int64_t> shape,
                         DType dtype = DType::kBF16) const {
    return ListOperand::InScratch(size(), 0, std::move(shape), dtype);
  }

  uint32_t size() const { return static_cast<uint32_t>(products_.size()); }

  // The whole list's stream order: the daemon waits before the first
  // product and signals after the last.
  void set_stream_order(const v1::StreamOrder& stream_order) {
    stream_order_ = stream_order;
  }

  // INVALID_ARGUMENT, naming the product and operand ("product 2: B:
  // ..."), for an empty list, an operand with no place or with both, a
  // rank other than 2 or 3, a dimension below 1, strides that do not
  // match the rank, an input that is not BF16, scratch read before the
  // product that makes it, a new scratch C that is not dense at offset 0
  // or has beta != 0, or shapes that do not multiply (op(A) [M, K],
  // op(B) [K, N], C [M, N]; batch dimensions are left to the daemon).
  absl::StatusOr<v1::MatmulRequest> Build() const;

 private:
  struct Product {
    ListOperand a;
    ListOperand b;
    ListOperand c;
    ListProductOptions options;
  };

  std::string session_id_;
  std::optional<v1::StreamOrder> stream_order_;
  std::vector<Product> products_;
};

// --- LoRA
// ---------------------------------------------------------------------

// One projection of a LoRA layer, proj(x) = x W^T + s (x A^T) B^T, with
// every operand rank 2 (flatten a batch into rows) and BF16.
struct LoraWeights {
  ListOperand w;    // [out, in], the frozen base weight
  ListOperand a;    // [rank, in]
  ListOperand b;    // [out, rank]
  float scale = 1;  // s = lora_alpha / rank
};

struct LoraForwardProjection {
  LoraWeights weights;
  ListOperand xa;  // [M, rank], BF16: written here, read by the backward
  ListOperand y;   // [M, out]: written (BF16 or FP32)
  // y already holds the bias (its rows, written by the client): the base
  // product adds onto it (beta 1) instead of overwriting it.
  bool y_holds_bias = false;
};

// Appends, per projection and in order, the three products
//   P1  xa = x A^T
//   P2  y  = x W^T          (y = x W^T + y with y_holds_bias)
//   P3  y += s xa B^T       (alpha s, beta 1: the adapter in the epilogue)
// for projections that share the input x [M, in] (e.g. an MLP's gate and
// up). INVALID_ARGUMENT for no projection or an operand that is not rank 2;
// the rest is checked by Build.
absl::Status AddLoraForward(
    ProductList& list, const ListOperand& x,
    absl::Span<const LoraForwardProjection> projections);

struct LoraBackwardProjection {
  LoraWeights weights;
  ListOperand xa;  // [M, rank], BF16, as the forward wrote it
  ListOperand dy;  // [M, out], BF16: the gradient of y
  ListOperand da;  // [rank, in]: written (BF16 or FP32)
  ListOperand db;  // [out, rank]: written (BF16 or FP32)
};

// Appends the backward of projections that share x with W frozen: per
// projection, in order,
//   t  = dy B               (into a new scratch buffer [M, rank], BF16)
//   dB = s dy^T xa
//   dA = s t^T x
// and, when dx [M, in] is given, the input's gradient summed over the
// projections,
//   dx  = dy W   (first projection; dx += dy W for the later ones)
//   dx += s t A
// after each projection's three. INVALID_ARGUMENT as AddLoraForward.
absl::Status AddLoraBackward(
    ProductList& list, const ListOperand& x,
    absl::Span<const LoraBackwardProjection> projections,
    const std::optional<ListOperand>& dx = std::nullopt);

}  // namespace matmul

#endif  // MATMUL_CLIENT_PRODUCT_LIST_H_
