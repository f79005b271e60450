// The CUDA side of backend_factory: how many GPUs there are and a backend on
// one of them. A build without CUDA (MATMUL_CUDA=OFF) links
// cuda_backend_factory_unavailable.cc instead, which sees no GPU and refuses
// --backend=cuda with FAILED_PRECONDITION.
#ifndef MATMUL_SERVER_BACKENDS_CUDA_BACKEND_FACTORY_H_
#define MATMUL_SERVER_BACKENDS_CUDA_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/gemm_backend.h"
#include "server/backends/backend_options.h"

namespace matmul {

// CUDA devices this process can use; 0 without a driver or a GPU.
int CudaDevicesPresent();

// A CUDA backend on options.cuda_device, configured from the cuda_ fields.
absl::StatusOr<std::unique_ptr<GemmBackend>> CreateCudaBackendFromOptions(
    const BackendOptions& options);

}  // namespace matmul

#endif  // MATMUL_SERVER_BACKENDS_CUDA_BACKEND_FACTORY_H_
