#include "server/backends/cuda_backend_factory.h"

#include "kernels/cuda/backend/cuda_backend.h"

namespace matmul {

int CudaDevicesPresent() { return cuda::CudaDeviceCount(); }

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateCudaBackendFromOptions(
    const BackendOptions& options) {
  return cuda::CreateCudaBackend(options.cuda);
}

}  // namespace matmul
