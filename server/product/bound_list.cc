#include "server/product/bound_list.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<BoundList>> BoundList::Bind(
    const ListPlan& plan, const v1::MatmulRequest& request,
    const RegionRegistry& registry, bool device_pointers) {
  std::unique_ptr<BoundList> bound(new BoundList());
  GemmList& list = bound->list_;
  list.scratch_bytes = plan.scratch_bytes;
  const size_t count = plan.products.size();
  list.products.reserve(count);
  bound->products_.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const v1::StreamOrder* order = i == 0 && request.has_stream_order()
                                       ? &request.stream_order()
                                       : nullptr;
    absl::StatusOr<std::unique_ptr<BoundOperands>> product =
        BoundOperands::BindListed(
            plan, i, request.products(static_cast<int>(i)),
            request.session_id(), order, registry, device_pointers);
    if (!product.ok()) {
      return InProduct(i, product.status());
    }
    const int device = (*product)->cuda_device();
    if (device >= 0 && bound->cuda_device_ >= 0 &&
        device != bound->cuda_device_) {
      return absl::FailedPreconditionError(
          absl::StrCat("product ", i, ": its regions are on CUDA device ",
                       device, " and an earlier product's on device ",
                       bound->cuda_device_, "; one list runs on one GPU"));
    }
    if (device >= 0) bound->cuda_device_ = device;
    bound->on_device_ = bound->on_device_ && (*product)->on_device();
    GemmProblem& problem = list.products.emplace_back((*product)->problem());
    // The list's stream order is the list's, not its first product's.
    if (problem.stream_order != nullptr) {
      list.stream_order = problem.stream_order;
      problem.stream_order = nullptr;
    }
    for (ScratchOperand use : (*product)->scratch_operands()) {
      use.product = i;
      list.scratch.push_back(use);
    }
    bound->products_.push_back(*std::move(product));
  }
  return bound;
}

absl::Status BoundList::CheckRegionsIntact() const {
  for (const std::unique_ptr<BoundOperands>& product : products_) {
    RETURN_IF_ERROR(product->CheckRegionsIntact());
  }
  return absl::OkStatus();
}

}  // namespace matmul
