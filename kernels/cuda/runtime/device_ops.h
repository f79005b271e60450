// Small device-side helpers the backend and the tuner need around a GEMM:
// gathering / scattering strided matrices and filling buffers with random
// BF16 values. Not performance critical: they run only for odd layouts
// (strides with no unit dimension) and when tuning.
#ifndef MATMUL_KERNELS_CUDA_RUNTIME_DEVICE_OPS_H_
#define MATMUL_KERNELS_CUDA_RUNTIME_DEVICE_OPS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::cuda {

// One side of a strided matrix copy: either `data` + batch * strides.batch,
// or (when `pointers` is non-null, a device-readable array) pointers[b].
struct StridedView {
  const void* data = nullptr;
  const void* const* pointers = nullptr;
  Strides strides;
  int pointer_alignment =
      0;  // bytes every pointers[b] is aligned to; 0: unknown
};
struct MutableStridedView {
  void* data = nullptr;
  void* const* pointers = nullptr;
  Strides strides;
  int pointer_alignment = 0;
};

// dst(b, i, j) = src(b, i, j) for b < batch, i < rows, j < cols, elements of
// `element_bytes` (2 or 4) bytes, on `stream`. Rows that are contiguous and
// 16-byte aligned on both sides are copied 16 bytes at a time.
absl::Status CopyMatrix(const StridedView& src, const MutableStridedView& dst,
                        int64_t batch, int64_t rows, int64_t cols,
                        int element_bytes, cudaStream_t stream);

// Fills `count` BF16 values with pseudo-random numbers of magnitude in
// [0.25, 1) and random sign, never zero (zeros hide unwritten outputs and run
// faster than real data), derived from `seed`.
absl::Status FillRandomBf16(void* data, int64_t count, uint64_t seed,
                            cudaStream_t stream);

// TEST ONLY: queues a kernel that writes far outside any allocation, so
// that the stream's next synchronisation fails with cudaErrorIllegalAddress
// and the context is poisoned for good (the device-lost path's test).
absl::Status LaunchOutOfRangeWrite(cudaStream_t stream);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_RUNTIME_DEVICE_OPS_H_
