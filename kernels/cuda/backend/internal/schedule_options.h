// Where each product runs (product_schedule.h), as the backend sets it up
// from CudaBackendOptions; CUDA-free.
#ifndef MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_SCHEDULE_OPTIONS_H_
#define MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_SCHEDULE_OPTIONS_H_

#include <cstdint>

namespace matmul::cuda {

struct ScheduleOptions {
  // Products of at least this many GFLOP per SM run on the stream all
  // slots share; > 0. Products on slots share the GPU, so their kernel time
  // includes the overlap; at this size a product fills the device alone
  // and gains nothing from overlapping.
  double serial_min_gflop_per_sm = 1.0;
  // TEST ONLY, for the device-lost path: the Nth product launch (from 1)
  // runs a kernel that writes out of range instead, which poisons the CUDA
  // context. 0: never.
  int64_t test_only_inject_fault_after = 0;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_SCHEDULE_OPTIONS_H_
