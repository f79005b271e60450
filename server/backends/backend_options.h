// The settings of the compute backend, from the daemon's flags: which kind,
// on which devices, and how each kind runs. Its own header so that the
// factory and the CUDA half it dispatches to both depend on it rather than
// on each other.
#ifndef MATMUL_SERVER_BACKENDS_BACKEND_OPTIONS_H_
#define MATMUL_SERVER_BACKENDS_BACKEND_OPTIONS_H_

#include <cstdint>
#include <string>

namespace matmul {

struct BackendOptions {
  std::string kind = "auto";  // auto | cpu | cuda
  int cuda_device = 0;
  // Several GPUs: "all", or ordinals "0,1"; empty uses cuda_device alone.
  std::string cuda_devices;
  std::string tuning_cache;  // JSON path for the CUDA selector; may be empty
  int cpu_threads = 0;   // OpenBLAS threads per product; 0: OpenBLAS decides
  int cuda_streams = 2;  // CUDA products in flight at once
  // See CudaBackendOptions::serial_min_gflop_per_sm.
  double cuda_serial_min_gflop_per_sm = 1.0;
  // See CudaBackendOptions::stream_order_waits_on_gpu.
  bool cuda_stream_order_waits_on_gpu = false;
  // TEST ONLY: see CudaBackendOptions' test_only_ fields.
  int64_t test_only_inject_gpu_fault_after = 0;
  int64_t test_only_gpu_memory_headroom_bytes = 0;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_BACKENDS_BACKEND_OPTIONS_H_
