// Whether this process's CUDA context on a device is a client of an MPS
// server (NVIDIA's Multi-Process Service). The driver has no query that
// says so; it offers contexts limited to a share of the SMs (execution
// affinity of type SM_COUNT) only to MPS clients, so that support is the
// sign. Call after the context exists (the backend has touched the device).
#ifndef MATMUL_KERNELS_CUDA_RUNTIME_MPS_CLIENT_H_
#define MATMUL_KERNELS_CUDA_RUNTIME_MPS_CLIENT_H_

namespace matmul::cuda {

// False where the driver cannot tell (no driver API, an old driver).
bool IsMpsClient(int device);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_RUNTIME_MPS_CLIENT_H_
