// Binds a validated product list to memory: each product as BoundOperands
// binds one (regions looked up, bounds-checked and held, outputs checked
// against the inputs), with scratch operands placed in the list's scratch
// block, and the list's stream order on its first product. The result is
// the GemmList a backend runs (kernels/gemm_list.h).
#ifndef MATMUL_SERVER_PRODUCT_BOUND_LIST_H_
#define MATMUL_SERVER_PRODUCT_BOUND_LIST_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm_list.h"
#include "matmul/v1/matmul.pb.h"
#include "server/product/bound_operands.h"
#include "server/product/request_validation.h"
#include "server/regions/region_registry.h"

namespace matmul {

class BoundList {
 public:
  // `request` (with products) must outlive the result. Fails as
  // BoundOperands::Bind does, the message prefixed "product i: "; also
  // FAILED_PRECONDITION for products whose regions are on two GPUs.
  static absl::StatusOr<std::unique_ptr<BoundList>> Bind(
      const ListPlan& plan, const v1::MatmulRequest& request,
      const RegionRegistry& registry, bool device_pointers);

  BoundList(const BoundList&) = delete;
  BoundList& operator=(const BoundList&) = delete;

  const GemmList& gemm_list() const { return list_; }
  // As BoundOperands: true when every product runs in place on the device.
  bool on_device() const { return on_device_; }
  int cuda_device() const { return cuda_device_; }
  bool stream_ordered() const { return list_.stream_order != nullptr; }
  void SetStreamOrderGiveUp(std::function<absl::Status()> give_up) {
    products_.front()->SetStreamOrderGiveUp(std::move(give_up));
  }
  absl::Status CheckRegionsIntact() const;

 private:
  BoundList() = default;

  std::vector<std::unique_ptr<BoundOperands>> products_;
  GemmList list_;
  bool on_device_ = true;
  int cuda_device_ = -1;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_PRODUCT_BOUND_LIST_H_
