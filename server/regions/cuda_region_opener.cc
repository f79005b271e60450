#include "server/regions/cuda_region_opener.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "common/cuda_driver_api.h"
#include "server/regions/cuda_ipc_region.h"
#include "server/regions/cuda_vmm_region.h"

namespace matmul {
namespace {

static_assert(kCudaIpcHandleBytes == sizeof(cudaIpcMemHandle_t));

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

class CudaDeviceRegionOpener final : public CudaRegionOpener {
 public:
  explicit CudaDeviceRegionOpener(int cuda_device)
      : device_(cuda_device),
        driver_(
            cuda_device >= 0
                ? LoadCudaDriverApi()
                : absl::StatusOr<CudaDriverApi>(absl::FailedPreconditionError(
                      "CUDA regions need a daemon on the CUDA "
                      "backend; this one runs on the CPU (register "
                      "shared memory instead)"))) {
    if (driver_.ok()) ipc_ = std::make_unique<CudaIpcOpener>(device_, *driver_);
  }

  absl::Status Ready() const override { return driver_.status(); }

  absl::StatusOr<std::unique_ptr<Region>> RegisterHost(
      std::unique_ptr<Region> host) override {
    return HostRegisteredRegion::Create(std::move(host), device_);
  }

  absl::StatusOr<std::unique_ptr<Region>> OpenIpc(
      const v1::CudaIpcRegion& ipc) override {
    return ipc_->Open(ipc);
  }

  absl::StatusOr<std::unique_ptr<Region>> OpenVmm(
      const v1::CudaVmmRegion& vmm, const PeerCredentials& peer) override {
    return OpenCudaVmmRegion(vmm, device_, *driver_, peer);
  }

 private:
  const int device_;
  const absl::StatusOr<CudaDriverApi> driver_;
  std::unique_ptr<CudaIpcOpener> ipc_;  // set when driver_ is
};

}  // namespace

std::unique_ptr<CudaRegionOpener> CreateCudaRegionOpener(int cuda_device) {
  return std::make_unique<CudaDeviceRegionOpener>(cuda_device);
}

}  // namespace matmul
