// The Hopper kernel's ping-pong form: the same product as gemm_kernel.cuh
// (C = alpha * op(A) * op(B) + beta * C, BF16 in, BF16 or FP32 out, each
// operand K- or MN-major), but each consumer warpgroup takes tiles of its
// own and the two take turns at the tensor cores: while one multiplies its
// tile, the other drains its last products and stores its previous tile.
// Where the two consumers of gemm_kernel.cuh share a tile, both stop
// multiplying during its epilogue, a cost that weighs on short K.
//
// A 128x128 tile per consumer (two m64n128k16 a k16 step, the same 128
// accumulators a thread as one m64n256), K in steps of 64, through a ring
// of pingpong::kStages stages that the producer fills in the order the
// block's tiles come: tile q of the block goes to consumer q % 2, so a
// consumer skips the other's stages in the ring. Turns: a consumer starts
// multiplying a tile once the other has issued all the products of the
// tile before it (the `turn` barriers). The grid is persistent (a block per
// SM, or fewer), tiles in grouped order; no clusters, no split.
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_PINGPONG_KERNEL_CUH_
#define MATMUL_KERNELS_HOPPER_INTERNAL_PINGPONG_KERNEL_CUH_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/hopper/internal/params.h"
#include "kernels/hopper/internal/ptx.cuh"
#include "kernels/hopper/internal/tile_io.cuh"
#include "kernels/hopper/internal/tile_shape.h"

namespace matmul::hopper::internal {

template <bool kAMnMajor, bool kBMnMajor, bool kFp32Out>
__global__ void __launch_bounds__(kThreads, 1)
    PingPongGemm(const __grid_constant__ CUtensorMap a_map,
                 const __grid_constant__ CUtensorMap b_map,
                 const __grid_constant__ CUtensorMap c_map,
                 const GemmParams params) {
  constexpr int kBM = pingpong::kBlockM;
  constexpr int kBN = pingpong::kBlockN;
  constexpr int kRing = pingpong::kStages;
  constexpr int kStep = pingpong::kStageBytes;
  extern __shared__ __align__(1024) unsigned char raw[];
  unsigned char* shared = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  __shared__ __align__(8) uint64_t full[kRing];
  __shared__ __align__(8) uint64_t empty[kRing];
  // turn[c]: the other consumer has issued the products of its tile.
  __shared__ __align__(8) uint64_t turn[2];
  __shared__ __align__(8) uint64_t c_loaded[2];  // a consumer's C chunks

  const int warpgroup = threadIdx.x / 128;
  const int tiles_m = (params.m + kBM - 1) / kBM;
  const int tiles_n = (params.n + kBN - 1) / kBN;
  const int tiles = tiles_m * tiles_n * params.batch;
  const int k_steps = (params.k + kBlockK - 1) / kBlockK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kRing; ++s) {
      BarrierInit(&full[s], 1);
      BarrierInit(&empty[s], 1);  // one consumer reads a stage
    }
    for (int c = 0; c < 2; ++c) {
      BarrierInit(&turn[c], 1);
      BarrierInit(&c_loaded[c], 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    GiveUpRegisters<kProducerRegisters>();
    if (threadIdx.x == 0) {
      int step = 0;  // k-steps loaded so far, across tiles
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int tile_m, tile_n, z;
        TileOrigin(tile, tiles_m, tiles_n, kBM, kBN, &tile_m, &tile_n, &z);
        for (int t = 0; t < k_steps; ++t, ++step) {
          const int s = step % kRing;
          if (step >= kRing) BarrierWait(&empty[s], ((step / kRing) - 1) & 1);
          BarrierExpectTx(&full[s], kStep);
          LoadStage<kBM, kBN, 1, kAMnMajor, kBMnMajor>(
              shared + s * kStep, &a_map, &b_map, &full[s], t * kBlockK, tile_m,
              tile_n, z * params.a_batch_step, z * params.b_batch_step, 0);
        }
      }
    }
    __syncwarp();
  } else {
    TakeRegisters<kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    const bool leads = threadIdx.x % 128 == 0;
    unsigned char* buffers =
        shared + kRing * kStep + consumer * kOutBuffers * kChunkBytes;
    Epilogue epilogue{params.alpha, params.beta, &c_loaded[consumer], 0};
    float acc[2][kBN / 2];  // rows 0-63 and 64-127 of the tile
    int step = 0;           // the ring's k-steps before this tile
    int q = 0;              // the block's tiles so far
    for (int tile = blockIdx.x; tile < tiles;
         tile += gridDim.x, ++q, step += k_steps) {
      if (q % 2 != consumer) continue;  // the other consumer's
      int tile_m, tile_n, z;
      TileOrigin(tile, tiles_m, tiles_n, kBM, kBN, &tile_m, &tile_n, &z);
      // The other consumer's tile q - 1 (its ((q - 1) / 2)-th) has all its
      // products issued.
      if (q > 0) BarrierWait(&turn[consumer], ((q - 1) / 2) & 1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int i = 0; i < kBN / 2; ++i) acc[h][i] = 0.0f;
      }
      for (int t = 0; t < k_steps; ++t) {
        const int s = (step + t) % kRing;
        BarrierWait(&full[s], ((step + t) / kRing) & 1);
        const unsigned char* stage = shared + s * kStep;
        const unsigned char* b = stage + kBM * kBlockK * 2;
        // Either way rows 64-127 of A start 8 KiB in.
        const uint64_t desc_a0 = OperandDescriptor<kAMnMajor>(stage);
        const uint64_t desc_a1 = OperandDescriptor<kAMnMajor>(stage + 64 * 128);
        const uint64_t desc_b = OperandDescriptor<kBMnMajor>(b);
        constexpr int kStepA = kDescriptorK16<kAMnMajor>;
        constexpr int kStepB = kDescriptorK16<kBMnMajor>;
        WgmmaFence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / 16; ++kk) {
          WgmmaM64N128K16<kAMnMajor, kBMnMajor>(acc[0], desc_a0 + kStepA * kk,
                                                desc_b + kStepB * kk, 1);
          WgmmaM64N128K16<kAMnMajor, kBMnMajor>(acc[1], desc_a1 + kStepA * kk,
                                                desc_b + kStepB * kk, 1);
        }
        WgmmaCommit();
        WgmmaWait<1>();
        // The stage of the previous k-step, whose products are complete.
        if (t >= 1 && leads) BarrierArrive(&empty[(step + t - 1) % kRing]);
      }
      // Every product of this tile is issued: the other consumer's turn.
      if (leads) BarrierArrive(&turn[1 - consumer]);
      WgmmaWait<0>();
      if (leads) BarrierArrive(&empty[(step + k_steps - 1) % kRing]);
      StoreRows<kBN, kFp32Out>(acc[0], epilogue, &c_map, buffers, 1 + consumer,
                               tile_m, tile_n, z);
      StoreRows<kBN, kFp32Out>(acc[1], epilogue, &c_map, buffers, 1 + consumer,
                               tile_m + 64, tile_n, z);
    }
    // Shared memory stays until the stores have read it.
    if (leads) TmaStoreWaitAll();
  }
}

}  // namespace matmul::hopper::internal

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_PINGPONG_KERNEL_CUH_
