// The epilogue: alpha * acc + beta * C -> C, straight from each warp's
// accumulator fragments to global memory, in FP32 or BF16. No staging
// through shared memory: each thread's fragments already hold pairs of
// adjacent columns, which become one 8- or 4-byte store when C's alignment
// allows, and C is read only when beta is non-zero.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_EPILOGUE_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_EPILOGUE_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/params.h"

namespace matmul::mma::internal {

// One element, for the columns that cannot take a paired store.
__device__ __forceinline__ void Store1(float* dst, float v, float beta,
                                       bool read_c) {
  *dst = read_c ? v + beta * *dst : v;
}
__device__ __forceinline__ void Store1(__nv_bfloat16* dst, float v, float beta,
                                       bool read_c) {
  *dst = __float2bfloat16_rn(read_c ? v + beta * __bfloat162float(*dst) : v);
}

// alpha * acc + beta * C -> C, straight from the accumulator fragments:
// each thread owns pairs of adjacent columns, stored as one 4- or 8-byte
// access when C's alignment allows.
template <class S, typename T>
__device__ __forceinline__ void Epilogue(const float (&acc)[S::kMI][S::kNJ][4],
                                         const KernelParams& p, T* c, int m0,
                                         int n0) {
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int row0 = m0 + (warp / S::kWN) * S::kWTM + (lane >> 2);
  const int col0 = n0 + (warp % S::kWN) * S::kWTN + (lane & 3) * 2;
  const bool pairs = (p.ldc % 2 == 0) &&
                     (reinterpret_cast<uintptr_t>(c) % (2 * sizeof(T)) == 0);
  const bool read_c = p.beta != 0.0f;
#pragma unroll
  for (int i = 0; i < S::kMI; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + i * 16 + h * 8;
      if (row >= p.m) continue;
      T* crow = c + static_cast<int64_t>(row) * p.ldc;
#pragma unroll
      for (int j = 0; j < S::kNJ; ++j) {
        const int col = col0 + j * 8;
        float v0 = p.alpha * acc[i][j][2 * h];
        float v1 = p.alpha * acc[i][j][2 * h + 1];
        if (pairs && col + 1 < p.n) {
          if constexpr (sizeof(T) == 4) {
            float2* dst = reinterpret_cast<float2*>(crow + col);
            if (read_c) {
              const float2 old = *dst;
              v0 += p.beta * old.x;
              v1 += p.beta * old.y;
            }
            *dst = make_float2(v0, v1);
          } else {
            __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(crow + col);
            if (read_c) {
              const float2 old = __bfloat1622float2(*dst);
              v0 += p.beta * old.x;
              v1 += p.beta * old.y;
            }
            *dst = __floats2bfloat162_rn(v0, v1);
          }
        } else {
          if (col < p.n) Store1(crow + col, v0, p.beta, read_c);
          if (col + 1 < p.n) Store1(crow + col + 1, v1, p.beta, read_c);
        }
      }
    }
  }
}

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_EPILOGUE_CUH_
