// Issue 22, the first rungs: C[M,N] = A[M,K] * B[N,K]^T (NT, BF16 in, BF16 out,
// FP32 accumulate) on sm_90a with TMA loads (128-byte swizzle) into a ring of
// shared-memory stages guarded by mbarriers, one producer warpgroup and two
// consumer warpgroups issuing wgmma m64n256k16, a 128x256x64 tile at a
// time, tiles in grouped order; rung by rung (see main). The harness checks it
// against cuBLASLt on the same random operands (NaN-poisoned output first) and
// times both with CUDA events.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a
//        kernels/hopper/wgmma_ladder.cu -lcublasLt -o wgmma-ladder
//   ./wgmma-ladder [M N K]
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kBlockM = 128;
constexpr int kBlockN = 256;
constexpr int kBlockK = 64;    // 64 BF16 = 128 bytes: one swizzle row
constexpr int kThreads = 384;  // producer WG + 2 consumer WGs
constexpr int kATileBytes = kBlockM * kBlockK * 2;
constexpr int kBTileBytes = kBlockN * kBlockK * 2;
constexpr int kStageBytes = kATileBytes + kBTileBytes;
// The TMA-store epilogue stages each consumer's 64x256 part of the output
// in 64x64 chunks (one 128-byte swizzle row wide).
constexpr int kChunkCols = 64;
constexpr int kChunkBytes = 64 * kChunkCols * 2;
constexpr int kChunks = kBlockN / kChunkCols;

// Stages plus `out_buffers` chunk buffers for each consumer, + alignment.
constexpr int SharedBytes(int stages, int out_buffers) {
  return stages * kStageBytes + 2 * out_buffers * kChunkBytes + 1024;
}

#include "wgmma_m64n256k16.inc"

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void BarrierInit(uint64_t* bar, int count) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SharedAddress(bar)),
      "r"(count));
}

__device__ __forceinline__ void BarrierExpectTx(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   SharedAddress(bar)),
               "r"(bytes));
}

__device__ __forceinline__ void BarrierArrive(uint64_t* bar) {
  asm volatile(
      "mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SharedAddress(bar)));
}

__device__ __forceinline__ void BarrierWait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(SharedAddress(bar)),
      "r"(parity));
}

__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map,
                                          uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(SharedAddress(dst)),
      "l"(map), "r"(SharedAddress(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// A K-major operand tile in shared memory, 128-byte swizzled: rows of 128
// bytes, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t SmemDescriptor(const void* p) {
  const uint64_t address = SharedAddress(p);
  uint64_t desc = (address & 0x3FFFF) >> 4;
  desc |= uint64_t{1} << 16;          // leading byte offset (unused: swizzled)
  desc |= uint64_t{1024 >> 4} << 32;  // stride byte offset: 8 rows
  desc |= uint64_t{1} << 62;          // 128-byte swizzle
  return desc;
}

// Tiles in grouped order: kGroupM tile rows at a time, column by column
// within the group, so that blocks running together share A rows and B
// columns in L2.
constexpr int kGroupM = 8;

__device__ __forceinline__ void TileOrigin(int tile, int tiles_m, int tiles_n,
                                           int block_m, int* tile_m,
                                           int* tile_n) {
  const int per_group = kGroupM * tiles_n;
  const int group = tile / per_group;
  const int first_m = group * kGroupM;
  const int rows = min(kGroupM, tiles_m - first_m);
  const int in_group = tile % per_group;
  *tile_m = (first_m + in_group % rows) * block_m;
  *tile_n = (in_group / rows) * kBlockN;
}

// Arrives at the barrier at the same shared-memory offset in cluster block
// `rank`. The default (CTA-scope) release suffices: what it orders is the
// completion of this block's wgmma reads of the peer's stage, and a
// cluster-scope release costs a memory barrier on every stage.
__device__ __forceinline__ void ClusterBarrierArrive(uint64_t* bar, int rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote)
               : "r"(SharedAddress(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote)
               : "memory");
}

__device__ __forceinline__ void ClusterSync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// Loads one box into the same shared-memory offset of every block in
// `mask`, completing bytes on each one's barrier at `bar`'s offset.
__device__ __forceinline__ void TmaLoad2dMulticast(void* dst,
                                                   const CUtensorMap* map,
                                                   uint64_t* bar, int c0,
                                                   int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::"
      "bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(
          SharedAddress(dst)),
      "l"(map), "r"(SharedAddress(bar)), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

__device__ __forceinline__ void TmaStore2d(const CUtensorMap* map,
                                           const void* src, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], "
      "[%1];\n" ::"l"(map),
      "r"(SharedAddress(src)), "r"(c0), "r"(c1)
      : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Until at most kPending of this thread's bulk stores still read shared
// memory.
template <int kPending>
__device__ __forceinline__ void TmaStoreWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending)
               : "memory");
}

// Synchronizes the 128 threads of one consumer warpgroup.
__device__ __forceinline__ void WarpgroupSync(int consumer) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + consumer) : "memory");
}

// Writes rows [64*consumer, +64) of the accumulator tile to C through
// shared memory: each 64-column chunk goes into a 128-byte swizzled buffer
// (conflict-free for the accumulator layout) and out with one TMA store,
// which runs on while the consumer goes on to its next tile. With
// kBuffers < kChunks a chunk reuses the buffer of the store kBuffers
// earlier once that has been read out; with a buffer per chunk, the only
// wait is for the previous tile's stores, long done.
template <int kBuffers, bool kIssueStores = true>
__device__ __forceinline__ void StoreThroughShared(const float (&acc)[128],
                                                   const CUtensorMap* c_map,
                                                   unsigned char* out,
                                                   int consumer, int tile_m,
                                                   int tile_n) {
  static_assert(kBuffers == kChunks || kBuffers == 2);
  const int thread = threadIdx.x % 128;
  const bool issues = thread == 0;
  const int lane = thread % 32;
  const int warp = thread / 32;
#pragma unroll
  for (int chunk = 0; chunk < kChunks; ++chunk) {
    unsigned char* buffer =
        out + (consumer * kBuffers + chunk % kBuffers) * kChunkBytes;
    if (chunk % kBuffers == 0 || kBuffers < kChunks) {
      if (issues) TmaStoreWaitRead < kBuffers<kChunks ? kBuffers - 1 : 0>();
      WarpgroupSync(consumer);
    }
#pragma unroll
    for (int j = 0; j < kChunkCols / 8; ++j) {
      const int jj = chunk * (kChunkCols / 8) + j;
      const int column_bytes = (8 * j + 2 * (lane % 4)) * 2;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp * 16 + lane / 4 + 8 * half;
        const int offset = row * 128 +
                           (((column_bytes / 16) ^ (row % 8)) * 16) +
                           column_bytes % 16;
        *reinterpret_cast<__nv_bfloat162*>(buffer + offset) =
            __floats2bfloat162_rn(acc[4 * jj + 2 * half],
                                  acc[4 * jj + 2 * half + 1]);
      }
    }
    if (kBuffers < kChunks || chunk == kChunks - 1) {
      // The generic-proxy writes above must be visible to the TMA unit.
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      WarpgroupSync(consumer);
      if (issues && kIssueStores) {
        const int first = kBuffers < kChunks ? chunk : 0;
        for (int c = first; c <= chunk; ++c) {
          TmaStore2d(c_map,
                     out + (consumer * kBuffers + c % kBuffers) * kChunkBytes,
                     tile_n + c * kChunkCols, tile_m + consumer * 64);
        }
      }
    }
  }
}

// kLeftOut names a part left out, for timing by difference: the rest runs
// as before, and the output is wrong.
enum LeftOut { kNothing, kStores, kProducts, kLoads, kGlobalStores };

// The last round of a persistent grid: when only `tail` of the clusters
// would have a tile left, each of those tiles is split along K into parts
// for the idle ones (at least kMinPartKTiles k-tiles each). Every part
// leaves its FP32 sums in a workspace slot; the last of a tile's parts to
// finish adds all slots up in part order (the same result whichever
// finishes last) and stores the tile.
constexpr int kMinPartKTiles = 4;

struct Schedule {
  int tiles;  // of kCluster blocks' tiles each
  int whole;  // tiles done whole, units 0..whole-1
  int parts;  // each later tile's parts (1: no split)
  int units;

  __device__ Schedule(int tiles, int clusters, int k_tiles, bool split_tail)
      : tiles(tiles), whole(tiles), parts(1), units(tiles) {
    const int tail = tiles % clusters;
    if (!split_tail || tail == 0) return;
    parts = min(clusters / tail, k_tiles / kMinPartKTiles);
    if (parts < 2) {
      parts = 1;
      return;
    }
    whole = tiles - tail;
    units = whole + tail * parts;
  }
};

struct Unit {
  int tile;
  int k_begin, k_end;  // k-tiles
  int split;           // index of the split tile among the tail, or -1
  int part;
};

__device__ __forceinline__ Unit UnitOf(const Schedule& schedule, int unit,
                                       int k_tiles) {
  if (unit < schedule.whole) return {unit, 0, k_tiles, -1, 0};
  const int split = (unit - schedule.whole) / schedule.parts;
  const int part = (unit - schedule.whole) % schedule.parts;
  return {schedule.whole + split, part * k_tiles / schedule.parts,
          (part + 1) * k_tiles / schedule.parts, split, part};
}

// Synchronizes the 256 consumer threads.
__device__ __forceinline__ void ConsumersSync() {
  asm volatile("bar.sync 3, 256;\n" ::: "memory");
}

// kInFlight: wgmma groups a consumer leaves running while it waits for the
// next stage (0: each k-tile's products finish before the next is issued;
// 1: the next tile's are issued first, and a stage is released one k-tile
// late). Each cluster walks tiles of kCluster x 1 blocks' tiles in grouped
// order, cluster id, + clusters, ...: one tile per block with a grid of
// every tile, or a persistent grid of one block per SM, whose producer loads
// the next tile while the consumers store the last. The stage ring runs on
// across tiles. With kCluster 2, the two blocks of a cluster take
// vertically adjacent tiles, which need the same B tile: each loads half of
// it into both (TMA multicast), so a stage is free again once the consumers
// of both blocks are done with it. `b_map`'s box is kBlockN / kCluster rows.
// kOutBuffers: 0, the epilogue stores from registers straight to global
// memory; otherwise through that many shared-memory chunk buffers a
// consumer and TMA (StoreThroughShared).
// kSplitTail: the last round as Schedule says, with `partials` (a
// 128 KiB slot per block of the grid) and `arrivals` (an int per block,
// zero before the first launch, left zero by each).
template <int kInFlight, int kLeftOut = kNothing, int kCluster = 1,
          int kOutBuffers = 0, int kStages = 4, bool kSplitTail = false>
__global__ void __launch_bounds__(kThreads, 1)
    GemmNt(const __grid_constant__ CUtensorMap a_map,
           const __grid_constant__ CUtensorMap b_map,
           const __grid_constant__ CUtensorMap c_map, __nv_bfloat16* c, int m,
           int n, int k, float* partials, int* arrivals) {
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ __align__(8) uint64_t empty[kStages];

  const int warpgroup = threadIdx.x / 128;
  // A 1-D grid's clusters are runs of kCluster consecutive blocks.
  const int rank = blockIdx.x % kCluster;
  const int cluster = blockIdx.x / kCluster;
  const int clusters = gridDim.x / kCluster;
  const int tiles_m = (m + kBlockM * kCluster - 1) / (kBlockM * kCluster);
  const int tiles_n = (n + kBlockN - 1) / kBlockN;
  const int tiles = tiles_m * tiles_n;  // of kCluster blocks' tiles each
  const int k_tiles = (k + kBlockK - 1) / kBlockK;
  const Schedule schedule(tiles, clusters, k_tiles, kSplitTail);
  __shared__ int last_part;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(&full[s], 1);
      // One arrive per consumer warpgroup of each block in the cluster.
      BarrierInit(&empty[s], 2 * kCluster);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (kCluster > 1) {
    ClusterSync();  // no block arrives at another's barrier before its init
  } else {
    __syncthreads();
  }

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      int step = 0;  // k-tiles loaded so far, across tiles
      for (int u = cluster; u < schedule.units; u += clusters) {
        const Unit unit = UnitOf(schedule, u, k_tiles);
        int tile_m, tile_n;
        TileOrigin(unit.tile, tiles_m, tiles_n, kBlockM * kCluster, &tile_m,
                   &tile_n);
        tile_m += rank * kBlockM;
        for (int t = unit.k_begin; t < unit.k_end; ++t, ++step) {
          const int s = step % kStages;
          if (step >= kStages) {
            BarrierWait(&empty[s], ((step / kStages) - 1) & 1);
          }
          unsigned char* stage = shared + s * kStageBytes;
          if (kLeftOut == kLoads) {
            BarrierArrive(&full[s]);
            continue;
          }
          BarrierExpectTx(&full[s], kStageBytes);
          TmaLoad2d(stage, &a_map, &full[s], t * kBlockK, tile_m);
          if (kCluster == 1) {
            TmaLoad2d(stage + kATileBytes, &b_map, &full[s], t * kBlockK,
                      tile_n);
          } else {
            constexpr int kPartRows = kBlockN / kCluster;
            TmaLoad2dMulticast(
                stage + kATileBytes + rank * kPartRows * kBlockK * 2, &b_map,
                &full[s], t * kBlockK, tile_n + rank * kPartRows,
                (1 << kCluster) - 1);
          }
        }
      }
    }
    __syncwarp();
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int consumer = warpgroup - 1;  // rows 64*consumer.. of the tile
    const bool releases = threadIdx.x % 128 == 0;
    const int lane = threadIdx.x % 32;
    const int warp = (threadIdx.x % 128) / 32;
    // Gives stage s back to the producers of every block in the cluster.
    auto release = [&](int s) {
      if (!releases) return;
      if (kCluster == 1) {
        BarrierArrive(&empty[s]);
      } else {
        for (int r = 0; r < kCluster; ++r) ClusterBarrierArrive(&empty[s], r);
      }
    };
    float acc[128];
    int step = 0;  // k-tiles consumed so far, across tiles
    for (int u = cluster; u < schedule.units; u += clusters) {
      const Unit unit = UnitOf(schedule, u, k_tiles);
      const int unit_k_tiles = unit.k_end - unit.k_begin;
      int tile_m, tile_n;
      TileOrigin(unit.tile, tiles_m, tiles_n, kBlockM * kCluster, &tile_m,
                 &tile_n);
      tile_m += rank * kBlockM;
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
      for (int t = 0; t < unit_k_tiles; ++t, ++step) {
        const int s = step % kStages;
        BarrierWait(&full[s], (step / kStages) & 1);
        const unsigned char* stage = shared + s * kStageBytes;
        const uint64_t desc_a =
            SmemDescriptor(stage + consumer * 64 * kBlockK * 2);
        const uint64_t desc_b = SmemDescriptor(stage + kATileBytes);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < (kLeftOut == kProducts ? 0 : kBlockK / 16);
             ++kk) {
          // 16 BF16 further along K: 32 bytes, 2 in the descriptor's units.
          WgmmaM64N256K16(acc, desc_a + 2 * kk, desc_b + 2 * kk, 1);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kInFlight)
                     : "memory");
        // The stage whose products are now complete goes back.
        if (t >= kInFlight) release((step - kInFlight) % kStages);
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      for (int late = kInFlight; late > 0; --late) {
        if (unit_k_tiles >= late) release((step - late) % kStages);
      }

      if (kSplitTail && unit.split >= 0) {
        // Slots of this block's part p of split tile `split`: the sums of
        // consumer thread j at [i * 256 + j], coalesced.
        const int j = threadIdx.x - 128;
        auto slot = [&](int p) {
          return partials +
                 int64_t{(unit.split * schedule.parts + p) * kCluster + rank} *
                     (kBlockM * kBlockN);
        };
        float* mine = slot(unit.part);
#pragma unroll
        for (int i = 0; i < 128; ++i) mine[i * 256 + j] = acc[i];
        __threadfence();
        ConsumersSync();
        if (j == 0) {
          int* arrived = &arrivals[unit.split * kCluster + rank];
          last_part = atomicAdd(arrived, 1) == schedule.parts - 1;
          if (last_part) *arrived = 0;  // ready for the next launch
        }
        ConsumersSync();
        if (!last_part) continue;
        __threadfence();
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        for (int p = 0; p < schedule.parts; ++p) {
          const float* sums = slot(p);
#pragma unroll
          for (int i = 0; i < 128; ++i) acc[i] += __ldcg(sums + i * 256 + j);
        }
      }

      if (kLeftOut == kStores) {
        // Keeps the products live: ptxas drops wgmma whose results are
        // never read.
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 128; ++i) sum += acc[i];
        if (sum == 1.0e-30f) c[0] = __float2bfloat16(sum);
        continue;
      }
      if constexpr (kOutBuffers > 0) {
        {
          StoreThroughShared<kOutBuffers, kLeftOut != kGlobalStores>(
              acc, &c_map, shared + kStages * kStageBytes, consumer, tile_m,
              tile_n);
        }
        continue;
      }
      // Accumulator layout of m64nN: warp w of the warpgroup holds rows
      // 16w..16w+15; lane l holds rows l/4 and l/4+8, columns 2(l%4)+8j, +1.
      const int row0 = tile_m + consumer * 64 + warp * 16 + lane / 4;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int col = tile_n + 8 * j + 2 * (lane % 4);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = row0 + 8 * half;
          if (row >= m) continue;
          const float x = acc[4 * j + 2 * half];
          const float y = acc[4 * j + 2 * half + 1];
          if (col + 1 < n && (n % 2) == 0) {
            *reinterpret_cast<__nv_bfloat162*>(c + int64_t{row} * n + col) =
                __floats2bfloat162_rn(x, y);
          } else {
            if (col < n) c[int64_t{row} * n + col] = __float2bfloat16(x);
            if (col + 1 < n) {
              c[int64_t{row} * n + col + 1] = __float2bfloat16(y);
            }
          }
        }
      }
    }
  }
  // Shared memory stays until the stores have read it.
  if (kOutBuffers > 0 && warpgroup > 0 && threadIdx.x % 128 == 0) {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
  // No block leaves while another may still arrive at its barriers.
  if (kCluster > 1) ClusterSync();
}

#define CHECK_CUDA(x)                                                \
  do {                                                               \
    cudaError_t e = (x);                                             \
    if (e != cudaSuccess) {                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, \
                   cudaGetErrorString(e));                           \
      std::exit(1);                                                  \
    }                                                                \
  } while (0)
#define CHECK_LT(x)                                                         \
  do {                                                                      \
    cublasStatus_t s = (x);                                                 \
    if (s != CUBLAS_STATUS_SUCCESS) {                                       \
      std::fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, \
                   static_cast<int>(s));                                    \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t,
                                 void*, const cuuint64_t*, const cuuint64_t*,
                                 const cuuint32_t*, const cuuint32_t*,
                                 CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill);

// A row-major [rows, cols] BF16 matrix (cols contiguous) in boxes of
// [box_rows, 64], 128-byte swizzled.
CUtensorMap KMajorMap(EncodeTiled encode, const void* data, int rows, int cols,
                      int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {kBlockK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(data),
             dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", static_cast<int>(r));
    std::exit(1);
  }
  return map;
}

// cuBLASLt's fastest of its top-8 for C = A * B^T (row-major), timed.
struct Baseline {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  int best = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = size_t{32} << 20;
};

void RunBaseline(const Baseline& base, int algo, const void* a, const void* b,
                 void* c, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major C[M,N] = A[M,K] B[N,K]^T is column-major C^T[N,M] =
  // B[N,K] (as K x N col-major, transposed) * A^T.
  CHECK_LT(cublasLtMatmul(base.handle, base.op, &alpha, b, base.lb, a, base.la,
                          &beta, c, base.lc, c, base.lc, &base.algos[algo].algo,
                          base.workspace, base.workspace_bytes, stream));
}

}  // namespace

int main(int argc, char** argv) {
  const int m = argc > 3 ? std::atoi(argv[1]) : 5120;
  const int n = argc > 3 ? std::atoi(argv[2]) : 11008;
  const int k = argc > 3 ? std::atoi(argv[3]) : 2048;
  const int reps = 50;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  std::mt19937 rng(22);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<__nv_bfloat16> ha(size_t{1} * m * k), hb(size_t{1} * n * k);
  for (auto& x : ha) x = __float2bfloat16(normal(rng));
  for (auto& x : hb) x = __float2bfloat16(normal(rng));
  __nv_bfloat16 *a, *b, *c, *c_ref;
  CHECK_CUDA(cudaMalloc(&a, ha.size() * 2));
  CHECK_CUDA(cudaMalloc(&b, hb.size() * 2));
  CHECK_CUDA(cudaMalloc(&c, size_t{2} * m * n));
  CHECK_CUDA(cudaMalloc(&c_ref, size_t{2} * m * n));
  CHECK_CUDA(cudaMemcpy(a, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(b, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(c, 0xFF, size_t{2} * m * n));  // NaN poison

  void* encode_fn = nullptr;
  cudaDriverEntryPointQueryResult query;
  CHECK_CUDA(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &encode_fn,
                                     cudaEnableDefault, &query));
  auto encode = reinterpret_cast<EncodeTiled>(encode_fn);
  const CUtensorMap a_map = KMajorMap(encode, a, m, k, kBlockM);
  const CUtensorMap b_map = KMajorMap(encode, b, n, k, kBlockN);

  const int tiles =
      ((m + kBlockM - 1) / kBlockM) * ((n + kBlockN - 1) / kBlockN);
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Baseline base;
  CHECK_LT(cublasLtCreate(&base.handle));
  CHECK_LT(cublasLtMatmulDescCreate(&base.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, none = CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(base.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                          &trans, sizeof(trans)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(base.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                          &none, sizeof(none)));
  CHECK_LT(cublasLtMatrixLayoutCreate(&base.lb, CUDA_R_16BF, k, n, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&base.la, CUDA_R_16BF, k, m, k));
  CHECK_LT(cublasLtMatrixLayoutCreate(&base.lc, CUDA_R_16BF, n, m, n));
  CHECK_CUDA(cudaMalloc(&base.workspace, base.workspace_bytes));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &base.workspace_bytes,
      sizeof(base.workspace_bytes)));
  base.algos.resize(8);
  int found = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(base.handle, base.op, base.lb,
                                          base.la, base.lc, base.lc, pref, 8,
                                          base.algos.data(), &found));
  base.algos.resize(found);

  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  auto time_ms = [&](auto&& fn) {
    for (int i = 0; i < 5; ++i) fn();
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; ++i) {
      CHECK_CUDA(cudaEventRecord(start, stream));
      fn();
      CHECK_CUDA(cudaEventRecord(stop, stream));
      CHECK_CUDA(cudaEventSynchronize(stop));
      CHECK_CUDA(cudaEventElapsedTime(&ms[i], start, stop));
    }
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
  };
  float best_ms = 1e30f;
  for (int i = 0; i < found; ++i) {
    const float t = time_ms([&] { RunBaseline(base, i, a, b, c_ref, stream); });
    if (t < best_ms) {
      best_ms = t;
      base.best = i;
    }
  }

  // Each step of the ladder: correctness on a freshly poisoned output,
  // then interleaved timing against cuBLASLt's best.
  RunBaseline(base, base.best, a, b, c_ref, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<__nv_bfloat16> hc(size_t{1} * m * n), hr(size_t{1} * m * n);
  CHECK_CUDA(
      cudaMemcpy(hr.data(), c_ref, hr.size() * 2, cudaMemcpyDeviceToHost));
  const double flop = 2.0 * m * n * k;
  bool all_ok = true;
  const CUtensorMap b_half_map = KMajorMap(encode, b, n, k, kBlockN / 2);
  // The split tail's workspace: a 128x256 FP32 slot and an arrival count
  // per block of a persistent grid.
  float* partials;
  int* arrivals;
  CHECK_CUDA(cudaMalloc(&partials, size_t{4} * kBlockM * kBlockN * sms));
  CHECK_CUDA(cudaMalloc(&arrivals, sizeof(int) * sms));
  CHECK_CUDA(cudaMemset(arrivals, 0, sizeof(int) * sms));
  // C[m, n] in boxes of 64 rows x 64 columns: the same map shape as a
  // K-major operand's.
  const CUtensorMap c_map = KMajorMap(encode, c, m, n, 64);
  int cluster_sms = 0;  // blocks of 2-block clusters that fit at once
  {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(2 * sms);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = SharedBytes(4, 2);
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 2;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CHECK_CUDA(cudaFuncSetAttribute(GemmNt<1, kNothing, 2, 2>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    SharedBytes(4, 2)));
    int clusters = 0;
    CHECK_CUDA(cudaOccupancyMaxActiveClusters(
        &clusters, GemmNt<1, kNothing, 2, 2>, &config));
    cluster_sms = 2 * clusters;
  }
  const int tiles_2 =
      ((m + 2 * kBlockM - 1) / (2 * kBlockM)) * ((n + kBlockN - 1) / kBlockN);
  std::printf("%d SMs, %d of them in 2-block clusters\n", sms, cluster_sms);

  // `grid` blocks in clusters of `cluster`.
  auto report = [&](const char* name, auto kernel, int grid, int cluster,
                    bool checked = true, int shared_bytes = SharedBytes(4, 2)) {
    CHECK_CUDA(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = cluster;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    const CUtensorMap& b_used = cluster == 1 ? b_map : b_half_map;
    auto ours = [&] {
      CHECK_CUDA(cudaLaunchKernelEx(&config, kernel, a_map, b_used, c_map, c, m,
                                    n, k, partials, arrivals));
    };
    CHECK_CUDA(cudaMemsetAsync(c, 0xFF, size_t{2} * m * n, stream));
    ours();
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaMemcpy(hc.data(), c, hc.size() * 2, cudaMemcpyDeviceToHost));
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < hc.size(); ++i) {
      const double x = __bfloat162float(hc[i]), y = __bfloat162float(hr[i]);
      diff += (x - y) * (x - y);
      norm += y * y;
    }
    const double error = std::sqrt(diff / norm);  // NaN when any is poison
    const bool ok = error < 1e-2;
    all_ok = all_ok && (ok || !checked);
    std::vector<float> ours_ms, theirs_ms;
    for (int r = 0; r < 5; ++r) {
      ours_ms.push_back(time_ms(ours));
      theirs_ms.push_back(
          time_ms([&] { RunBaseline(base, base.best, a, b, c_ref, stream); }));
    }
    std::sort(ours_ms.begin(), ours_ms.end());
    std::sort(theirs_ms.begin(), theirs_ms.end());
    auto tflops = [&](float ms) { return flop / (ms * 1e-3) * 1e-12; };
    std::printf(
        "%-24s %dx%dx%d NT: rel err %.2e (%s); %.1f TFLOP/s (%.1f..%.1f), "
        "cuBLASLt algo %d of %d %.1f TFLOP/s; ratio %.3f\n",
        name, m, n, k, error,
        !checked ? "not checked"
        : ok     ? "ok"
                 : "WRONG",
        tflops(ours_ms[2]), tflops(ours_ms[4]), tflops(ours_ms[0]), base.best,
        found, tflops(theirs_ms[2]), tflops(ours_ms[2]) / tflops(theirs_ms[2]));
  };
  const int persistent = std::min(tiles, sms);
  const int persistent_2 = std::min(2 * tiles_2, cluster_sms);
  const char* only = std::getenv("RUNGS");  // e.g. "34": only those rungs
  auto wanted = [&](char rung) {
    return only == nullptr || std::strchr(only, rung) != nullptr;
  };
  if (wanted('1')) report("1 wgmma, wait 0", GemmNt<0>, tiles, 1);
  if (wanted('2')) report("2 one group in flight", GemmNt<1>, tiles, 1);
  if (wanted('3')) report("3 persistent, grouped", GemmNt<1>, persistent, 1);
  if (wanted('4')) {
    report("4 TMA-store epilogue", GemmNt<1, kNothing, 1, 2>, persistent, 1);
  }
  if (wanted('4')) {
    report("4b 3 stages, 4 out buffers", GemmNt<1, kNothing, 1, 4, 3>,
           persistent, 1, true, SharedBytes(3, 4));
  }
  if (wanted('5')) {
    report("5 2-block clusters, B multicast", GemmNt<1, kNothing, 2, 2>,
           persistent_2, 2);
  }
  if (wanted('6')) {
    report("6 split tail", GemmNt<1, kNothing, 1, 2, 4, true>, persistent, 1);
    report("6 split tail, clusters", GemmNt<1, kNothing, 2, 2, 4, true>,
           persistent_2, 2);
  }
  if (std::getenv("LEFT_OUT") != nullptr) {
    // Rungs 3 and 4 less one part each: where the time goes, by difference.
    report("3 without stores", GemmNt<1, kStores>, persistent, 1, false);
    report("4 without TMA stores", GemmNt<1, kGlobalStores, 1, 2>, persistent,
           1, false);
    report("3 without products", GemmNt<1, kProducts>, persistent, 1, false);
    report("3 without loads", GemmNt<1, kLoads>, persistent, 1, false);
    report("5 without loads", GemmNt<1, kLoads, 2, 2>, persistent_2, 2, false);
    report("5 without stores", GemmNt<1, kStores, 2, 2>, persistent_2, 2,
           false);
    report("5 without products", GemmNt<1, kProducts, 2, 2>, persistent_2, 2,
           false);
  }
  return all_ok ? 0 : 1;
}
