#include "kernels/cuda/runtime/device_info.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kernels/cuda/runtime/cuda_status.h"

namespace matmul::cuda {

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return 0;
  }
  return count;
}

absl::StatusOr<DeviceInfo> DescribeDevice(int device) {
  cudaDeviceProp prop;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, device),
                             "cudaGetDeviceProperties"));
  DeviceInfo info;
  info.name = prop.name;
  info.compute_capability = absl::StrCat(prop.major, ".", prop.minor);
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.multiprocessors = prop.multiProcessorCount;
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  info.uuid = absl::StrFormat(
      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%"
      "02x",
      u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
      u[12], u[13], u[14], u[15]);
  return info;
}

}  // namespace matmul::cuda
