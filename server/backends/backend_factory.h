// Chooses and creates the compute backend named by --backend.
#ifndef MATMUL_SERVER_BACKENDS_BACKEND_FACTORY_H_
#define MATMUL_SERVER_BACKENDS_BACKEND_FACTORY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gemm_backend.h"
#include "server/backends/backend_options.h"

namespace matmul {

// auto: cuda when a CUDA device is present, else cpu.
absl::StatusOr<std::unique_ptr<GemmBackend>> CreateBackend(
    const BackendOptions& options);

// One backend per device the daemon runs on: one per GPU named by
// cuda_devices (or cuda_device) for CUDA, a single one for the CPU.
absl::StatusOr<std::vector<std::unique_ptr<GemmBackend>>> CreateBackends(
    const BackendOptions& options);

}  // namespace matmul

#endif  // MATMUL_SERVER_BACKENDS_BACKEND_FACTORY_H_
