#include "server/backends/cuda_backend_factory.h"

#include "kernels/cuda/backend/cuda_backend.h"

namespace matmul {

int CudaDevicesPresent() { return cuda::CudaDeviceCount(); }

absl::StatusOr<std::unique_ptr<GemmBackend>> CreateCudaBackendFromOptions(
    const BackendOptions& options) {
  cuda::CudaBackendOptions cuda;
  cuda.device = options.cuda_device;
  cuda.tuning_cache_path = options.tuning_cache;
  cuda.streams = options.cuda_streams;
  cuda.serial_min_gflop_per_sm = options.cuda_serial_min_gflop_per_sm;
  cuda.stream_order_waits_on_gpu = options.cuda_stream_order_waits_on_gpu;
  cuda.test_only_inject_fault_after = options.test_only_inject_gpu_fault_after;
  cuda.test_only_memory_headroom_bytes =
      options.test_only_gpu_memory_headroom_bytes;
  return cuda::CreateCudaBackend(cuda);
}

}  // namespace matmul
