// What both Hopper kernels (gemm_kernel.cuh, pingpong_kernel.cuh) do the
// same way: the grouped tile order, the TMA loads of a k-step into a stage,
// and the epilogue's stores through shared memory.
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_TILE_IO_CUH_
#define MATMUL_KERNELS_HOPPER_INTERNAL_TILE_IO_CUH_

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/hopper/internal/ptx.cuh"
#include "kernels/hopper/internal/tile_shape.h"

namespace matmul::hopper::internal {

// Tile `tile` of a batch of tiles_m x tiles_n grids of block_m x block_n
// tiles, a matrix after another, each in grouped order: its matrix `z` and
// its origin there.
__device__ __forceinline__ void TileOrigin(int tile, int tiles_m, int tiles_n,
                                           int block_m, int block_n,
                                           int* tile_m, int* tile_n, int* z) {
  *z = tile / (tiles_m * tiles_n);
  tile %= tiles_m * tiles_n;
  const int per_group = kGroupM * tiles_n;
  const int group = tile / per_group;
  const int first_m = group * kGroupM;
  const int rows = min(kGroupM, tiles_m - first_m);
  const int in_group = tile % per_group;
  *tile_m = (first_m + in_group % rows) * block_m;
  *tile_n = (in_group / rows) * block_n;
}

// The wgmma descriptor of a 64-row (M or N) slice of an operand in a
// stage: K-major rows of 128 bytes, or MN-major 64x64 boxes 8 KiB apart.
template <bool kMnMajor>
__device__ __forceinline__ uint64_t OperandDescriptor(const void* slice) {
  return kMnMajor ? MnMajorDescriptor(slice, 64 * 128)
                  : KMajorDescriptor(slice);
}

// What an operand's descriptor advances by for 16 K further on: 32 bytes
// along a K-major row, 16 rows of 128 bytes down an MN-major tile (in the
// descriptor's 16-byte units).
template <bool kMnMajor>
inline constexpr int kDescriptorK16 = kMnMajor ? 16 * 128 / 16 : 32 / 16;

// What the epilogue scales by, and (beta != 0) where it reads C first:
// one barrier a consumer, and how many chunks it has read through it.
struct Epilogue {
  float alpha, beta;
  uint64_t* c_loaded;
  int c_loads;
};

// Writes the 64 rows from `row0` and kN columns from `col0` that a
// warpgroup's m64nN accumulators hold as alpha * acc (+ beta * C), in BF16
// or (kFp32) FP32, through shared memory: each chunk of one 128-byte row by
// 64 rows (64 BF16 or 32 FP32 columns) goes into one of the warpgroup's
// kOutBuffers 128-byte swizzled `buffers` (conflict-free for the
// accumulator layout) and out with one TMA store, which runs on while the
// warpgroup goes on. A chunk reuses the buffer of the store kOutBuffers
// earlier once that is read out; with beta, C's chunk is first loaded by
// TMA into that buffer. `barrier`: the warpgroup's named barrier; `z`: the
// matrix of the batch.
template <int kN, bool kFp32>
__device__ __forceinline__ void StoreRows(const float (&acc)[kN / 2],
                                          Epilogue& e, const CUtensorMap* c_map,
                                          unsigned char* buffers, int barrier,
                                          int row0, int col0, int z) {
  using Pair = std::conditional_t<kFp32, float2, __nv_bfloat162>;
  constexpr int kCols = 128 / sizeof(Pair) * 2;  // columns a chunk
  const int thread = threadIdx.x % 128;
  const bool issues = thread == 0;
  const int lane = thread % 32;
  const int warp = thread / 32;
  const bool reads_c = e.beta != 0.0f;
#pragma unroll
  for (int chunk = 0; chunk < kN / kCols; ++chunk) {
    unsigned char* buffer = buffers + (chunk % kOutBuffers) * kChunkBytes;
    const int c0 = col0 + chunk * kCols;
    if (issues) TmaStoreWaitRead<kOutBuffers - 1>();
    NamedBarrierSync(barrier, 128);
    if (reads_c) {
      if (issues) {
        BarrierExpectTx(e.c_loaded, kChunkBytes);
        TmaLoad3d(buffer, c_map, e.c_loaded, c0, row0, z);
      }
      BarrierWait(e.c_loaded, e.c_loads & 1);
      ++e.c_loads;
    }
    // Accumulator layout of m64nN: warp w holds rows 16w..16w+15; lane l
    // rows l/4 and l/4+8, columns 2(l%4)+8j and the next.
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const int jj = chunk * (kCols / 8) + j;
      const int column_bytes = (8 * j + 2 * (lane % 4)) * sizeof(Pair) / 2;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp * 16 + lane / 4 + 8 * half;
        const int offset = row * 128 +
                           (((column_bytes / 16) ^ (row % 8)) * 16) +
                           column_bytes % 16;
        Pair* at = reinterpret_cast<Pair*>(buffer + offset);
        float x = e.alpha * acc[4 * jj + 2 * half];
        float y = e.alpha * acc[4 * jj + 2 * half + 1];
        if constexpr (kFp32) {
          if (reads_c) {
            x += e.beta * at->x;
            y += e.beta * at->y;
          }
          *at = make_float2(x, y);
        } else {
          if (reads_c) {
            const float2 old = __bfloat1622float2(*at);
            x += e.beta * old.x;
            y += e.beta * old.y;
          }
          *at = __floats2bfloat162_rn(x, y);
        }
      }
    }
    FenceSharedForTma();
    NamedBarrierSync(barrier, 128);
    if (issues) TmaStore3d(c_map, buffer, c0, row0, z);
  }
}

// Loads the k-step at column `k0` of A's rows [tile_m, +kBM) and B's
// columns [tile_n, +kBN) into `stage` (A's kBM x kBlockK, then B's),
// completing bytes on `full`, from matrix `za` of A's batch and `zb` of
// B's. A K-major operand comes as one box of its rows (B: a 1/kCluster
// share of them, multicast to the cluster); an MN-major one as boxes of 64
// K-rows by 64 M (N) columns, 8 KiB apart (B: a 1/kCluster share of the
// boxes).
template <int kBM, int kBN, int kCluster, bool kAMnMajor, bool kBMnMajor>
__device__ __forceinline__ void LoadStage(
    unsigned char* stage, const CUtensorMap* a_map, const CUtensorMap* b_map,
    uint64_t* full, int k0, int tile_m, int tile_n, int za, int zb, int rank) {
  constexpr int kBoxBytes = 64 * kBlockK * 2;
  if (kAMnMajor) {
    for (int q = 0; q < kBM / 64; ++q) {
      TmaLoad3d(stage + q * kBoxBytes, a_map, full, tile_m + 64 * q, k0, za);
    }
  } else {
    TmaLoad3d(stage, a_map, full, k0, tile_m, za);
  }
  unsigned char* b = stage + kBM * kBlockK * 2;
  if (kBMnMajor) {
    constexpr int kBoxes = kBN / 64 / kCluster;
    for (int q = rank * kBoxes; q < (rank + 1) * kBoxes; ++q) {
      if (kCluster == 1) {
        TmaLoad3d(b + q * kBoxBytes, b_map, full, tile_n + 64 * q, k0, zb);
      } else {
        TmaLoad3dMulticast(b + q * kBoxBytes, b_map, full, tile_n + 64 * q, k0,
                           zb, (1 << kCluster) - 1);
      }
    }
  } else if (kCluster == 1) {
    TmaLoad3d(b, b_map, full, k0, tile_n, zb);
  } else {
    constexpr int kPartRows = kBN / kCluster;
    TmaLoad3dMulticast(b + rank * kPartRows * kBlockK * 2, b_map, full, k0,
                       tile_n + rank * kPartRows, zb, (1 << kCluster) - 1);
  }
}

}  // namespace matmul::hopper::internal

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_TILE_IO_CUH_
