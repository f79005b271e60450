#include "server/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace matmul {

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateBackend(
    const BackendOptions& options) {
  const bool want_cuda = options.kind == "cuda" ||
                         (options.kind == "auto" && CudaDeviceCount() > 0);
  if (want_cuda) {
    CudaBackendOptions cuda;
    cuda.device = options.cuda_device;
    cuda.tuning_cache_path = options.tuning_cache;
    cuda.streams = options.cuda_streams;
    return CreateCudaBackend(cuda);
  }
  if (options.kind == "cpu" || options.kind == "auto") {
    return CpuBackend::Create(options.cpu_threads);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown backend '", options.kind, "'; expected auto, cpu or cuda"));
}

}  // namespace matmul
