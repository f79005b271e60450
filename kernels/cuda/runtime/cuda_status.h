// Turns CUDA runtime and cuBLAS status codes into absl::Status, so every
// fallible CUDA call composes with RETURN_IF_ERROR / ASSIGN_OR_RETURN.
#ifndef MATMUL_KERNELS_CUDA_RUNTIME_CUDA_STATUS_H_
#define MATMUL_KERNELS_CUDA_RUNTIME_CUDA_STATUS_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace matmul::cuda {

// True for the errors after which the CUDA context is unusable for the
// rest of the process (every later call returns them too): illegal or
// misaligned addresses, failed launches, hardware exceptions, uncorrectable
// ECC and NVLink errors, contained hardware errors, device-side asserts.
bool IsStickyCudaError(cudaError_t error);

// OK for cudaSuccess; otherwise an error whose message names the call and
// carries CUDA's own error name and text. A sticky error (above) maps to
// DeviceLostError (kernels/device_lost.h), out-of-memory to
// RESOURCE_EXHAUSTED, a missing driver or device to UNAVAILABLE, bad
// arguments to INVALID_ARGUMENT and everything else to INTERNAL. A
// non-sticky error is also cleared from the thread's last error, so that
// the next launch check (LastLaunchStatus) does not report it again.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// The same for cuBLAS / cuBLASLt status codes.
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);

// Checks (and clears) the sticky launch error after a kernel launch.
inline absl::Status LastLaunchStatus(absl::string_view what) {
  return CudaStatus(cudaGetLastError(), what);
}

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_RUNTIME_CUDA_STATUS_H_
