// The settings of the compute backend, from the daemon's flags: which kind,
// on which devices, and how each kind runs; the CUDA backend's own struct
// nested whole, so that a setting keeps one name from flag to use. Its own
// header so that the factory and the CUDA half it dispatches to both depend on
// it rather than on each other.
#ifndef MATMUL_SERVER_BACKENDS_BACKEND_OPTIONS_H_
#define MATMUL_SERVER_BACKENDS_BACKEND_OPTIONS_H_

#include <string>

#include "kernels/cuda/backend/cuda_backend_options.h"

namespace matmul {

struct BackendOptions {
  std::string kind = "auto";  // auto | cpu | cuda
  // Several GPUs: "all", or ordinals "0,1"; empty uses cuda.device alone.
  std::string cuda_devices;
  int cpu_threads = 0;  // OpenBLAS threads per product; 0: OpenBLAS decides
  // The CUDA backend's settings, one per device (cuda.device is each
  // one's ordinal); --tuning_cache is cuda.selector.tuning_cache.
  cuda::CudaBackendOptions cuda;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_BACKENDS_BACKEND_OPTIONS_H_
