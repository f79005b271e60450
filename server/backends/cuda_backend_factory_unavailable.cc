// The daemon built without CUDA (MATMUL_CUDA=OFF): no GPU is ever seen, so
// --backend=auto picks the CPU, and --backend=cuda says why it cannot run.
#include "server/backends/cuda_backend_factory.h"

namespace matmul {

int CudaDevicesPresent() { return 0; }

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateCudaBackendFromOptions(
    const BackendOptions& /*options*/) {
  return absl::FailedPreconditionError(
      "the CUDA backend is not available: this daemon was built without "
      "CUDA (MATMUL_CUDA=OFF); use --backend=cpu");
}

}  // namespace matmul
