// The __global__ entry points and what picks their work: GROUP_M
// rasterisation of block tiles (TileOrigin), the batch entry's operands
// (EntryA/B/C), one tile from zeroed accumulators through a main loop to
// the epilogue (GemmTile), and the three kernels: cp.async (GemmKernel,
// kVec), the unaligned fallback (GemmKernel, !kVec) and the copy-engine
// kernel (GemmKernelTma). Also the compile-time rules for which configs
// have which kernel, which instantiate.cuh reads to fill the launch tables.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_KERNELS_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_KERNELS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/cp_async_mainloop.cuh"
#include "kernels/mma/internal/epilogue.cuh"
#include "kernels/mma/internal/params.h"
#include "kernels/mma/internal/ptx.cuh"
#include "kernels/mma/internal/smem_tile.cuh"
#include "kernels/mma/internal/tile_shape.h"
#include "kernels/mma/internal/tma_mainloop.cuh"

namespace matmul::mma::internal {

// Tile coordinates of block-tile `pid` under GROUP_M rasterization (as the
// seed): blocks walk groups of kGroupM tile rows column by column, so that
// neighbours share A rows and B columns in L2.
template <class S>
__device__ __forceinline__ void TileOrigin(const KernelParams& p, int pid,
                                           int& m0, int& n0) {
  const int in_group = S::kGroupM * p.tiles_n;
  const int group = pid / in_group;
  const int first_m = group * S::kGroupM;
  const int group_rows = min(p.tiles_m - first_m, S::kGroupM);
  m0 = (first_m + (pid % in_group) % group_rows) * S::kBM;
  n0 = ((pid % in_group) / group_rows) * S::kBN;
}

__device__ __forceinline__ const uint16_t* EntryA(const KernelParams& p,
                                                  int batch) {
  return p.a_ptrs ? static_cast<const uint16_t*>(p.a_ptrs[batch])
                  : p.a + batch * p.a_batch;
}
__device__ __forceinline__ const uint16_t* EntryB(const KernelParams& p,
                                                  int batch) {
  return p.b_ptrs ? static_cast<const uint16_t*>(p.b_ptrs[batch])
                  : p.b + batch * p.b_batch;
}
__device__ __forceinline__ void* EntryC(const KernelParams& p, int batch) {
  return p.c_ptrs
             ? p.c_ptrs[batch]
             : static_cast<char*>(p.c) + batch * p.c_batch * (p.c_fp32 ? 4 : 2);
}

// kTma: the copy-engine main loop (GemmKernelTma), else cp.async (kVec) or
// 2-byte loads.
template <class S, Major kA, Major kB, bool kVec, bool kTma = false>
__device__ __forceinline__ void GemmTile(const KernelParams& p, int pid,
                                         uint32_t smem) {
  float acc[S::kMI][S::kNJ][4];
#pragma unroll
  for (int i = 0; i < S::kMI; ++i)
#pragma unroll
    for (int j = 0; j < S::kNJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  {
    int m0, n0;
    TileOrigin<S>(p, pid, m0, n0);
    if constexpr (kTma) {
      TmaMainloop<S, kA, kB>::TmaLoop(acc, p, m0, n0, smem);
    } else {
      CpAsyncMainloop<S, kA, kB>::template MainLoop<kVec>(
          acc, p, EntryA(p, blockIdx.y), EntryB(p, blockIdx.y), m0, n0, smem);
    }
  }
  // Recomputed rather than kept live through the main loop: registers are
  // what limits these tiles.
  int m0, n0;
  TileOrigin<S>(p, pid, m0, n0);
  void* c = EntryC(p, blockIdx.y);
  if (p.c_fp32) {
    Epilogue<S>(acc, p, static_cast<float*>(c), m0, n0);
  } else {
    Epilogue<S>(acc, p, static_cast<__nv_bfloat16*>(c), m0, n0);
  }
}

// kVec: the fast kernel (16-byte cp.async), one block per tile. Blocks
// whose batch entry has a misaligned A or B base (possible only with
// pointer arrays) return at once without writing; the !kVec kernel,
// launched after it, covers exactly those entries (all entries when the
// leading dimensions are misaligned). Keeping the two loaders in separate
// kernels keeps the fast one's registers free. The !kVec kernel loops over
// tiles with a grid stride so that the fix-up launch can be a handful of
// blocks per batch entry.
template <class S, Major kA, Major kB, bool kVec>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks)
    GemmKernel(const __grid_constant__ KernelParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const bool aligned =
      p.ld_aligned && ((reinterpret_cast<uintptr_t>(EntryA(p, blockIdx.y)) |
                        reinterpret_cast<uintptr_t>(EntryB(p, blockIdx.y))) &
                       15) == 0;
  if (aligned != kVec) return;
  const uint32_t smem_base = SmemAddress(smem);
  if constexpr (kVec) {
    GemmTile<S, kA, kB, kVec>(p, blockIdx.x, smem_base);
  } else {
    const int tiles = p.tiles_m * p.tiles_n;
    for (int pid = blockIdx.x; pid < tiles; pid += gridDim.x) {
      GemmTile<S, kA, kB, kVec>(p, pid, smem_base);
      __syncthreads();  // the next tile reuses shared memory
    }
  }
}

// Whether config S has a cp.async kernel for these layouts: an MN-major
// operand's shared rows run along its block edge, which must make 64-byte
// or whole 128-byte rows (SmemTile).
template <class S, Major kA, Major kB>
constexpr bool kHasCpAsyncKernel = (kA == Major::kK ||
                                    IsSharedRowSize(S::kBM * 2)) &&
                                   (kB == Major::kK ||
                                    IsSharedRowSize(S::kBN * 2));

// Whether config S has a TMA kernel: rows of whole 128-byte panels
// (block_k 64 or 128; block_m and block_n multiples of 64 for MN-major
// operands), and warp tiles wider than 64 only along a K-major operand
// (an MN-major one's 96-wide fragment offsets would cross panels).
template <class S, Major kA, Major kB>
constexpr bool kHasTmaKernel =
    (S::kWTM <= 64 || kA == Major::kK) &&
    (S::kWTN <= 64 || kB == Major::kK) && S::kBK % 64 == 0 &&
    (kA == Major::kK || S::kBM % 64 == 0) &&
    (kB == Major::kK || S::kBN % 64 == 0);

// Dynamic shared memory of the TMA kernel.
template <class S>
constexpr int kTmaSharedBytes = S::kSharedBytes +
                                TmaExtraSharedBytes(S::kStages);

// The copy-engine kernel (the host launches it on sm_90 and later only):
// one block per tile of a single product whose A and B have tensor maps in
// p (batch 1, 16-byte aligned bases and leading dimensions).
template <class S, Major kA, Major kB>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks)
    GemmKernelTma(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t base = (SmemAddress(smem) + 1023) & ~1023u;
  GemmTile<S, kA, kB, true, true>(p, blockIdx.x, base);
#else
  // Compiled for a part without the copy engine and run on one with it
  // (PTX of an older target): the same tile through the cp.async loop.
  extern __shared__ __align__(128) uint8_t smem[];
  GemmTile<S, kA, kB, true>(p, blockIdx.x, SmemAddress(smem));
#endif
}

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_KERNELS_CUH_
