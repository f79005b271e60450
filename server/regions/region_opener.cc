#include "server/regions/region_opener.h"

#include "absl/strings/str_cat.h"
#include "server/regions/shm_region.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<Region>> OpenRegion(
    const v1::RegisterRegionRequest& request,
    const RegionOpenOptions& options) {
  switch (request.kind_case()) {
    case v1::RegisterRegionRequest::kShm: {
      const v1::ShmRegion& shm = request.shm();
      absl::StatusOr<std::unique_ptr<ShmRegion>> region = ShmRegion::Open(
          shm.name(), options.shm_prefix, shm.offset_bytes(), shm.size_bytes());
      if (!region.ok()) return region.status();
      return std::unique_ptr<Region>(*std::move(region));
    }
    case v1::RegisterRegionRequest::kCudaIpc:
    case v1::RegisterRegionRequest::kCudaVmm:
      if (!options.cuda_backend) {
        return absl::FailedPreconditionError(
            "CUDA regions need a daemon on the CUDA backend; this one runs "
            "on the CPU (register shared memory instead)");
      }
      return absl::UnimplementedError(
          "CUDA IPC and VMM regions are not served by this version yet");
    case v1::RegisterRegionRequest::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "RegisterRegion needs one of shm, cuda_ipc or cuda_vmm");
}

}  // namespace matmul
