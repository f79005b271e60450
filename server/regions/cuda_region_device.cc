#include "server/regions/cuda_region_device.h"

#include "absl/strings/str_cat.h"
#include "common/cuda_driver_api.h"

namespace matmul {

absl::Status CheckRegionDevice(int daemon_device, int32_t ordinal,
                               const std::string& uuid) {
  if (!uuid.empty()) {
    const std::string ours = CudaDeviceUuid(daemon_device);
    if (uuid != ours) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the memory is on device ", uuid, " but this daemon serves device ",
          daemon_device, " (", ours,
          "); register it with a daemon on that "
          "device"));
    }
    return absl::OkStatus();
  }
  if (ordinal != daemon_device) {
    return absl::FailedPreconditionError(
        absl::StrCat("the memory is on device ", ordinal,
                     " but this daemon serves device ", daemon_device,
                     " (send device_uuid when the two processes number "
                     "devices differently, e.g. under CUDA_VISIBLE_DEVICES)"));
  }
  return absl::OkStatus();
}

}  // namespace matmul
