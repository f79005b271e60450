// A region as a session that opened another session's share sees it
// (RegionRegistry::OpenShared): the owner's memory, read-only. It holds the
// owner's region, so products that bound it keep the memory mapped until
// they finish even when the owner withdraws the share meanwhile.
#ifndef MATMUL_SERVER_REGIONS_SHARED_REGION_H_
#define MATMUL_SERVER_REGIONS_SHARED_REGION_H_

#include <memory>
#include <string>
#include <utility>

#include "server/regions/region.h"

namespace matmul {

class SharedRegion final : public Region {
 public:
  explicit SharedRegion(std::shared_ptr<Region> owner)
      : owner_(std::move(owner)) {}

  std::string kind() const override { return "shared"; }
  int64_t size_bytes() const override { return owner_->size_bytes(); }
  void* host_data() const override { return owner_->host_data(); }
  void* device_data() const override { return owner_->device_data(); }
  Placement placement() const override { return owner_->placement(); }
  int cuda_device() const override { return owner_->cuda_device(); }
  bool writable() const override { return false; }
  absl::Status CheckIntact() const override { return owner_->CheckIntact(); }

 private:
  const std::shared_ptr<Region> owner_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_REGIONS_SHARED_REGION_H_
