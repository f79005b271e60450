// The Hopper kernel: C[m, n] = alpha * op(A) * op(B) + beta * C, BF16 in,
// BF16 or FP32 out, FP32 accumulation, on sm_90a. Each operand is K-major (A
// "N" [m, k], B "T" stored [n, k] as PyTorch's Linear weight) or MN-major (A
// "T" stored [k, m], B "N" [k, n]); wgmma reads either from shared memory, the
// latter transposed.
//
// A 128x256 output tile per block, K in steps of 64 (one 128-byte swizzle
// row): a producer warpgroup's one thread loads A and B tiles by TMA into
// a ring of kStages shared-memory stages guarded by mbarriers (full: the
// bytes have landed; empty: the consumers are done with it); two consumer
// warpgroups each multiply 64 rows of the tile with wgmma m64n256k16, one
// group of four in flight, and give a stage back one k-step late. setmaxnreg
// moves registers from the producer to the consumers.
//
// The grid is persistent (a block per SM, or fewer): blocks walk tiles in
// grouped order (kGroupM tile rows at a time, column by column) so that
// neighbours share A and B in L2, and the stage ring runs on across tiles,
// so the producer loads the next tile while the consumers store the last.
// Stores go through shared memory and TMA (StoreTile), which overlap the
// next tile's products. With kCluster 2 the two blocks of a cluster take
// vertically adjacent tiles that need the same B tile: each loads half of
// it into both (TMA multicast).
//
// The last round, where only a few tiles would be left for all the
// clusters, splits those tiles along K (Schedule; with at most half as
// many tiles as clusters, every tile): each part leaves FP32 sums in a
// workspace slot, and the last part to finish adds the slots up in part
// order (the result does not depend on which finishes last) and stores
// the tile.
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_GEMM_KERNEL_CUH_
#define MATMUL_KERNELS_HOPPER_INTERNAL_GEMM_KERNEL_CUH_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/hopper/internal/params.h"
#include "kernels/hopper/internal/ptx.cuh"
#include "kernels/hopper/internal/schedule.h"
#include "kernels/hopper/internal/tile_io.cuh"
#include "kernels/hopper/internal/tile_shape.h"

namespace matmul::hopper::internal {

template <int kCluster, bool kAMnMajor, bool kBMnMajor, bool kFp32Out>
__global__ void __launch_bounds__(kThreads, 1)
    Gemm(const __grid_constant__ CUtensorMap a_map,
         const __grid_constant__ CUtensorMap b_map,
         const __grid_constant__ CUtensorMap c_map, const GemmParams params) {
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ __align__(8) uint64_t empty[kStages];
  __shared__ __align__(8) uint64_t c_loaded[2];  // a consumer's C chunks
  __shared__ int last_part;

  const int warpgroup = threadIdx.x / 128;
  // A 1-D grid's clusters are runs of kCluster consecutive blocks.
  const int rank = blockIdx.x % kCluster;
  const int cluster = blockIdx.x / kCluster;
  const int clusters = gridDim.x / kCluster;
  const int tiles_m =
      (params.m + kBlockM * kCluster - 1) / (kBlockM * kCluster);
  const int tiles_n = (params.n + kBlockN - 1) / kBlockN;
  const int k_steps = (params.k + kBlockK - 1) / kBlockK;
  const Schedule schedule(tiles_m * tiles_n * params.batch, clusters, k_steps,
                          params.partials != nullptr);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(&full[s], 1);
      // One arrive per consumer warpgroup of each block in the cluster.
      BarrierInit(&empty[s], 2 * kCluster);
    }
    for (int c = 0; c < 2; ++c) BarrierInit(&c_loaded[c], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (kCluster > 1) {
    ClusterSync();  // no block arrives at another's barrier before its init
  } else {
    __syncthreads();
  }

  if (warpgroup == 0) {
    GiveUpRegisters<kProducerRegisters>();
    if (threadIdx.x == 0) {
      int step = 0;  // k-steps loaded so far, across tiles
      for (int u = cluster; u < schedule.units; u += clusters) {
        const Unit unit = UnitOf(schedule, u, k_steps);
        int tile_m, tile_n, z;
        TileOrigin(unit.tile, tiles_m, tiles_n, kBlockM * kCluster, kBlockN,
                   &tile_m, &tile_n, &z);
        tile_m += rank * kBlockM;
        for (int t = unit.k_begin; t < unit.k_end; ++t, ++step) {
          const int s = step % kStages;
          if (step >= kStages) {
            BarrierWait(&empty[s], ((step / kStages) - 1) & 1);
          }
          BarrierExpectTx(&full[s], kStageBytes);
          LoadStage<kBlockM, kBlockN, kCluster, kAMnMajor, kBMnMajor>(
              shared + s * kStageBytes, &a_map, &b_map, &full[s], t * kBlockK,
              tile_m, tile_n, z * params.a_batch_step, z * params.b_batch_step,
              rank);
        }
      }
    }
    __syncwarp();
  } else {
    TakeRegisters<kConsumerRegisters>();
    const int consumer = warpgroup - 1;  // rows 64*consumer.. of the tile
    const int j = threadIdx.x - 128;     // among the 256 consumer threads
    // Gives stage s back to the producers of every block in the cluster.
    auto release = [&](int s) {
      if (threadIdx.x % 128 != 0) return;
      if (kCluster == 1) {
        BarrierArrive(&empty[s]);
      } else {
        for (int r = 0; r < kCluster; ++r) ClusterBarrierArrive(&empty[s], r);
      }
    };
    Epilogue epilogue{params.alpha, params.beta, &c_loaded[consumer], 0};
    float acc[128];
    int step = 0;  // k-steps consumed so far, across tiles
    for (int u = cluster; u < schedule.units; u += clusters) {
      const Unit unit = UnitOf(schedule, u, k_steps);
      const int unit_steps = unit.k_end - unit.k_begin;
      int tile_m, tile_n, z;
      TileOrigin(unit.tile, tiles_m, tiles_n, kBlockM * kCluster, kBlockN,
                 &tile_m, &tile_n, &z);
      tile_m += rank * kBlockM;
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
      for (int t = 0; t < unit_steps; ++t, ++step) {
        const int s = step % kStages;
        BarrierWait(&full[s], (step / kStages) & 1);
        const unsigned char* stage = shared + s * kStageBytes;
        // Either way this consumer's 64 rows of A start 8 KiB in.
        const unsigned char* a = stage + consumer * 64 * kBlockK * 2;
        const unsigned char* b = stage + kATileBytes;
        const uint64_t desc_a = OperandDescriptor<kAMnMajor>(a);
        const uint64_t desc_b = OperandDescriptor<kBMnMajor>(b);
        constexpr int kStepA = kDescriptorK16<kAMnMajor>;
        constexpr int kStepB = kDescriptorK16<kBMnMajor>;
        WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / 16; ++kk) {
          WgmmaM64N256K16<kAMnMajor, kBMnMajor>(acc, desc_a + kStepA * kk,
                                                desc_b + kStepB * kk, 1);
        }
        WgmmaCommit();
        WgmmaWait<1>();
        // The stage of the previous k-step, whose products are complete.
        if (t >= 1) release((step - 1) % kStages);
      }
      WgmmaWait<0>();
      release((step - 1) % kStages);

      if (unit.split >= 0) {
        // This block's slot for part p of split tile `split`: the sums of
        // consumer thread j at [i * 256 + j], coalesced.
        auto slot = [&](int p) {
          return params.partials +
                 int64_t{(unit.split * schedule.parts + p) * kCluster + rank} *
                     kTileElements;
        };
        // A warp whose 16 rows all lie past C's last row keeps no sums
        // (the store leaves those rows out): a short M moves less.
        const bool keeps =
            consumer * 64 + (j % 128) / 32 * 16 < params.m - tile_m;
        float* mine = slot(unit.part);
        if (keeps) {
#pragma unroll
          for (int i = 0; i < 128; ++i) mine[i * 256 + j] = acc[i];
        }
        __threadfence();
        NamedBarrierSync(3, 256);
        if (j == 0) {
          int* arrived = &params.arrivals[unit.split * kCluster + rank];
          last_part = atomicAdd(arrived, 1) == schedule.parts - 1;
          if (last_part) *arrived = 0;  // as the next launch expects it
        }
        NamedBarrierSync(3, 256);
        if (!last_part) continue;
        __threadfence();
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        for (int p = 0; keeps && p < schedule.parts; ++p) {
          const float* sums = slot(p);
#pragma unroll
          for (int i = 0; i < 128; ++i) acc[i] += __ldcg(sums + i * 256 + j);
        }
      }
      StoreRows<kBlockN, kFp32Out>(
          acc, epilogue, &c_map,
          shared + kStages * kStageBytes + consumer * kOutBuffers * kChunkBytes,
          1 + consumer, tile_m + 64 * consumer, tile_n, z);
    }
    // Shared memory stays until the stores have read it.
    if (threadIdx.x % 128 == 0) TmaStoreWaitAll();
  }
  // No block leaves while another may still arrive at its barriers.
  if (kCluster > 1) ClusterSync();
}

}  // namespace matmul::hopper::internal

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_GEMM_KERNEL_CUH_
