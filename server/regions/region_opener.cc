#include "server/regions/region_opener.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/regions/cuda_vmm_region.h"
#include "server/regions/shm_region.h"

namespace matmul {
namespace {

// Host memory (a shm mapping) registered with CUDA so kernels on the device
// read and write it in place; unregistered before the mapping goes.
class HostRegisteredRegion final : public Region {
 public:
  static absl::StatusOr<std::unique_ptr<Region>> Create(
      std::unique_ptr<Region> host, int device) {
    if (cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cudaSetDevice(", device, "): ", cudaGetErrorString(error)));
    }
    void* data = host->host_data();
    cudaError_t error =
        cudaHostRegister(data, static_cast<size_t>(host->size_bytes()),
                         cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (error != cudaSuccess) {
      cudaGetLastError();
      return absl::FailedPreconditionError(absl::StrCat(
          "cudaHostRegister of the shm mapping: ", cudaGetErrorString(error)));
    }
    void* device_data = nullptr;
    error = cudaHostGetDevicePointer(&device_data, data, 0);
    if (error != cudaSuccess) {
      cudaHostUnregister(data);
      return absl::FailedPreconditionError(absl::StrCat(
          "cudaHostGetDevicePointer: ", cudaGetErrorString(error)));
    }
    return std::unique_ptr<Region>(
        new HostRegisteredRegion(std::move(host), device_data));
  }
  ~HostRegisteredRegion() override { cudaHostUnregister(host_->host_data()); }

  std::string kind() const override { return host_->kind(); }
  int64_t size_bytes() const override { return host_->size_bytes(); }
  void* host_data() const override { return host_->host_data(); }
  void* device_data() const override { return device_data_; }
  Placement placement() const override { return host_->placement(); }
  // The GPU reads the pages pinned at registration, which outlive a
  // truncation; the daemon's CPU mapping is what faults if anything touches
  // it, and the host region knows.
  absl::Status CheckIntact() const override { return host_->CheckIntact(); }

 private:
  HostRegisteredRegion(std::unique_ptr<Region> host, void* device_data)
      : host_(std::move(host)), device_data_(device_data) {}

  std::unique_ptr<Region> host_;
  void* const device_data_;
};

}  // namespace

RegionOpener::RegionOpener(const RegionOpenOptions& options)
    : options_(options),
      driver_(options.cuda_device >= 0
                  ? LoadCudaDriverApi()
                  : absl::StatusOr<CudaDriverApi>(absl::FailedPreconditionError(
                        "CUDA regions need a daemon on the CUDA backend; "
                        "this one runs on the CPU (register shared memory "
                        "instead)"))) {
  if (driver_.ok()) {
    ipc_ = std::make_unique<CudaIpcOpener>(options_.cuda_device, *driver_);
  }
}

absl::Status RegionOpener::CudaReady() const { return driver_.status(); }

absl::StatusOr<std::unique_ptr<Region>> RegionOpener::OpenShm(
    const v1::ShmRegion& shm, const PeerCredentials& peer) {
  absl::StatusOr<std::unique_ptr<ShmRegion>> region =
      ShmRegion::Open(shm.name(), options_.shm_prefix, shm.offset_bytes(),
                      shm.size_bytes(), peer, options_.allow_other_shm_owners);
  if (!region.ok()) return region.status();
  if (options_.cuda_device < 0)
    return std::unique_ptr<Region>(*std::move(region));
  return HostRegisteredRegion::Create(*std::move(region), options_.cuda_device);
}

absl::StatusOr<std::unique_ptr<Region>> RegionOpener::Open(
    const v1::RegisterRegionRequest& request, const PeerCredentials& peer) {
  switch (request.kind_case()) {
    case v1::RegisterRegionRequest::kShm:
      return OpenShm(request.shm(), peer);
    case v1::RegisterRegionRequest::kCudaIpc:
      if (request.cuda_ipc().handle().size() != sizeof(cudaIpcMemHandle_t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda_ipc handle has ", request.cuda_ipc().handle().size(),
            " bytes; expected ", sizeof(cudaIpcMemHandle_t),
            " (a cudaIpcMemHandle_t)"));
      }
      if (absl::Status ready = CudaReady(); !ready.ok()) return ready;
      return ipc_->Open(request.cuda_ipc());
    case v1::RegisterRegionRequest::kCudaVmm: {
      // Like a cuda_ipc handle's length: malformed whatever the backend,
      // and so is a pid that is not the caller's.
      ASSIGN_OR_RETURN(const CudaVmmLayout layout,
                       ParseCudaVmmRegion(request.cuda_vmm()));
      RETURN_IF_ERROR(CheckCudaVmmCaller(layout, peer));
      RETURN_IF_ERROR(CudaReady());
      return OpenCudaVmmRegion(request.cuda_vmm(), options_.cuda_device,
                               *driver_, peer);
    }
    case v1::RegisterRegionRequest::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "RegisterRegion needs one of shm, cuda_ipc or cuda_vmm");
}

}  // namespace matmul
