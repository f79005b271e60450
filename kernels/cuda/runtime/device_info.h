// What the CUDA backend knows of a device: whether there is one at all,
// and its description for DeviceInfo (name, compute capability, memory,
// multiprocessors, UUID).
#ifndef MATMUL_KERNELS_CUDA_RUNTIME_DEVICE_INFO_H_
#define MATMUL_KERNELS_CUDA_RUNTIME_DEVICE_INFO_H_

#include "absl/status/statusor.h"
#include "kernels/gemm_backend.h"

namespace matmul::cuda {

// Number of usable CUDA devices; 0 when there is no GPU, no driver or the
// runtime fails to initialise. Never crashes, never throws.
int CudaDeviceCount();

// `device`'s description, its UUID as nvidia-smi -L prints it.
absl::StatusOr<DeviceInfo> DescribeDevice(int device);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_RUNTIME_DEVICE_INFO_H_
