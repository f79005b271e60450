// Kernel parameters shared by the host API (plain C++) and the kernels.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_PARAMS_H_
#define MATMUL_KERNELS_MMA_INTERNAL_PARAMS_H_

#include <cuda.h>  // CUtensorMap (a plain struct; no driver library needed)

#include <cstdint>

namespace matmul::mma::internal {

// Which dimension of an operand is contiguous in global memory.
enum class Major { kK, kMN };

// Everything the kernel needs, by value. Strides are in elements; lda/ldb
// are the operand's non-unit stride, ldc C's row stride.
struct KernelParams {
  const uint16_t* a;
  const uint16_t* b;
  void* c;
  const void* const* a_ptrs;  // pointer-array mode when non-null
  const void* const* b_ptrs;
  void* const* c_ptrs;
  int64_t a_batch;
  int64_t b_batch;
  int64_t c_batch;
  int64_t lda;
  int64_t ldb;
  int64_t ldc;
  int m;
  int n;
  int k;
  int tiles_m;
  int tiles_n;
  float alpha;
  float beta;
  int c_fp32;
  // Host-side part of the fast-path test: lda and ldb are multiples of 8.
  // Base alignment is checked per block on the device.
  int ld_aligned;
  // Copy-engine descriptors of A and B (128-byte swizzle, boxes of 64
  // contiguous elements), set only for the TMA kernel (GemmKernelTma).
  CUtensorMap tma_a;
  CUtensorMap tma_b;
};

// Shared memory the TMA kernel needs beyond its stages: up to 1023 bytes
// to align them to 1024, and two 8-byte barriers per stage.
constexpr int TmaExtraSharedBytes(int stages) { return 1024 + 16 * stages; }

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_PARAMS_H_
