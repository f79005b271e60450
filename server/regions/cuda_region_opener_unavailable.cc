// The daemon built without CUDA (MATMUL_CUDA=OFF): it runs only on the CPU
// backend, so shm regions are never registered with a device and the CUDA
// kinds of region are refused, saying why. No GPU means no device either,
// so no region's device can match the daemon's.
#include "server/regions/cuda_region_device.h"
#include "server/regions/cuda_region_opener.h"

namespace matmul {
namespace {

absl::Status BuiltWithoutCuda() {
  return absl::FailedPreconditionError(
      "CUDA regions need a daemon on the CUDA backend; this one was built "
      "without CUDA (MATMUL_CUDA=OFF): register shared memory instead");
}

class UnavailableCudaRegionOpener final : public CudaRegionOpener {
 public:
  absl::Status Ready() const override { return BuiltWithoutCuda(); }

  absl::StatusOr<std::unique_ptr<Region>> RegisterHost(
      std::unique_ptr<Region> /*host*/) override {
    return BuiltWithoutCuda();
  }

  absl::StatusOr<std::unique_ptr<Region>> OpenIpc(
      const v1::CudaIpcRegion& /*ipc*/) override {
    return BuiltWithoutCuda();
  }

  absl::StatusOr<std::unique_ptr<Region>> OpenVmm(
      const v1::CudaVmmRegion& /*vmm*/,
      const PeerCredentials& /*peer*/) override {
    return BuiltWithoutCuda();
  }
};

}  // namespace

absl::Status CheckRegionDevice(int /*daemon_device*/, int32_t /*ordinal*/,
                               const std::string& /*uuid*/) {
  return BuiltWithoutCuda();
}

std::unique_ptr<CudaRegionOpener> CreateCudaRegionOpener(int /*cuda_device*/) {
  return std::make_unique<UnavailableCudaRegionOpener>();
}

}  // namespace matmul
