#include "server/regions/region_opener.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/regions/cuda_vmm_layout.h"
#include "server/regions/shm_region.h"

namespace matmul {

RegionOpener::RegionOpener(const RegionOpenOptions& options)
    : options_(options), cuda_(CreateCudaRegionOpener(options.cuda_device)) {}

absl::StatusOr<std::unique_ptr<Region>> RegionOpener::OpenShm(
    const v1::ShmRegion& shm, const PeerCredentials& peer) {
  absl::StatusOr<std::unique_ptr<ShmRegion>> region =
      ShmRegion::Open(shm.name(), options_.shm.prefix, shm.offset_bytes(),
                      shm.size_bytes(), peer, options_.shm.allow_other_owners);
  if (!region.ok()) return region.status();
  if (options_.cuda_device < 0)
    return std::unique_ptr<Region>(*std::move(region));
  return cuda_->RegisterHost(*std::move(region));
}

absl::StatusOr<std::unique_ptr<Region>> RegionOpener::Open(
    const v1::RegisterRegionRequest& request, const PeerCredentials& peer) {
  switch (request.kind_case()) {
    case v1::RegisterRegionRequest::kShm:
      return OpenShm(request.shm(), peer);
    case v1::RegisterRegionRequest::kCudaIpc:
      if (request.cuda_ipc().handle().size() != kCudaIpcHandleBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda_ipc handle has ", request.cuda_ipc().handle().size(),
            " bytes; expected ", kCudaIpcHandleBytes,
            " (a cudaIpcMemHandle_t)"));
      }
      RETURN_IF_ERROR(cuda_->Ready());
      return cuda_->OpenIpc(request.cuda_ipc());
    case v1::RegisterRegionRequest::kCudaVmm: {
      // Like a cuda_ipc handle's length: malformed whatever the backend,
      // and so is a pid that is not the caller's.
      ASSIGN_OR_RETURN(const CudaVmmLayout layout,
                       ParseCudaVmmRegion(request.cuda_vmm()));
      RETURN_IF_ERROR(CheckCudaVmmCaller(layout, peer));
      RETURN_IF_ERROR(cuda_->Ready());
      return cuda_->OpenVmm(request.cuda_vmm(), peer);
    }
    case v1::RegisterRegionRequest::kShared:
      // Opens nothing: the registry gives the share's region an id
      // (RegionRegistry::OpenShared).
      return absl::InvalidArgumentError(
          "a shared region is registered through the region registry");
    case v1::RegisterRegionRequest::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "RegisterRegion needs one of shm, cuda_ipc, cuda_vmm or shared");
}

}  // namespace matmul
