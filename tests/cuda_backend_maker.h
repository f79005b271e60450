// A TestDaemon backend maker for the CUDA backend (tests/test_daemon.h).
#ifndef MATMUL_TESTS_CUDA_BACKEND_MAKER_H_
#define MATMUL_TESTS_CUDA_BACKEND_MAKER_H_

#include <cstdio>
#include <functional>
#include <memory>

#include "kernels/cuda/backend/cuda_backend.h"

namespace matmul {

// Makes a CUDA backend with `options`; null (and the reason on stderr)
// when it cannot, which TestDaemon reports as a failed server start.
inline std::function<std::unique_ptr<GemmBackend>()> CudaBackendMaker(
    const cuda::CudaBackendOptions& options) {
  return [options]() -> std::unique_ptr<GemmBackend> {
    absl::StatusOr<std::unique_ptr<GemmBackend>> backend =
        cuda::CreateCudaBackend(options);
    if (!backend.ok()) {
      std::fprintf(stderr, "CUDA backend: %s\n",
                   backend.status().ToString().c_str());
      return nullptr;
    }
    return *std::move(backend);
  };
}

}  // namespace matmul

#endif  // MATMUL_TESTS_CUDA_BACKEND_MAKER_H_
