// CpAsyncMainloop: the pipelined k-loop of the cp.async kernels (and of the
// unaligned fallback, whose loader uses 2-byte loads instead). Every thread
// copies its share of each k-tile (TileLoader) into a ring of kStages
// shared stages; cp.async groups and one block barrier per k-tile keep
// kStages - 1 tiles in flight while the warps run their MMAs (WarpTile).
// Interior blocks take a copy of the loop without predicates.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_CP_ASYNC_MAINLOOP_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_CP_ASYNC_MAINLOOP_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/params.h"
#include "kernels/mma/internal/ptx.cuh"
#include "kernels/mma/internal/tile_loader.cuh"
#include "kernels/mma/internal/warp_tile.cuh"

namespace matmul::mma::internal {

template <class S, Major kA, Major kB>
struct CpAsyncMainloop {
  using W = WarpTile<S, kA, kB>;
  using Frags = typename W::Frags;
  using OffsetsA = typename W::OffsetsA;
  using OffsetsB = typename W::OffsetsB;
  using InPlaceFrags = typename W::InPlaceFrags;

  // Issues the cp.async loads of k-tile `tile` into the stage at dst_a and
  // dst_b, then moves the loaders on to the next k-tile. kFull: the tile is
  // wholly in range (no predicates).
  template <bool kFull, class LoaderA, class LoaderB>
  __device__ __forceinline__ static void LoadTile(const KernelParams& p,
                                                  int tile, uint32_t dst_a,
                                                  uint32_t dst_b,
                                                  LoaderA& load_a,
                                                  LoaderB& load_b) {
    if constexpr (kFull) {
      load_a.LoadFull(dst_a, p.lda);
      load_b.LoadFull(dst_b, p.ldb);
    } else {
      const int k_left = p.k - tile * S::kBK;
      load_a.Load(dst_a, p.lda, k_left);
      load_b.Load(dst_b, p.ldb, k_left);
    }
    load_a.Advance(p.lda);
    load_b.Advance(p.ldb);
  }

  template <bool kVec>
  __device__ __forceinline__ static void MainLoop(
      float (&acc)[S::kMI][S::kNJ][4], const KernelParams& p, const uint16_t* a,
      const uint16_t* b, int m0, int n0, uint32_t smem) {
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wm = (warp / S::kWN) * S::kWTM;
    const int wn = (warp % S::kWN) * S::kWTN;

    TileLoader<kA, S::kBM, S::kBK, S::kThreads, kVec, S::kInPlaceFrags> load_a(
        a, p.lda, m0, p.m, p.k);
    TileLoader<kB, S::kBN, S::kBK, S::kThreads, kVec, S::kInPlaceFrags> load_b(
        b, p.ldb, n0, p.n, p.k);
    const uint32_t smem_b = smem + S::kStages * S::kStageBytesA;
    const int k_tiles = (p.k + S::kBK - 1) / S::kBK;
    // k-tiles [0, full_tiles) of an interior block load without predicates.
    const int full_tiles =
        (kVec && m0 + S::kBM <= p.m && n0 + S::kBN <= p.n) ? p.k / S::kBK : 0;
    // Prologue: stages 0 .. kStages-2 in flight.
#pragma unroll
    for (int s = 0; s < S::kStages - 1; ++s) {
      const uint32_t dst_a = smem + s * S::kStageBytesA;
      const uint32_t dst_b = smem_b + s * S::kStageBytesB;
      if (s < full_tiles) {
        LoadTile<kVec>(p, s, dst_a, dst_b, load_a, load_b);
      } else if (s < k_tiles) {
        LoadTile<false>(p, s, dst_a, dst_b, load_a, load_b);
      }
      CpAsyncCommit();
    }
    CpAsyncWait<S::kStages - 2>();
    __syncthreads();

    const OffsetsA offs_a(wm, lane);
    const OffsetsB offs_b(wn, lane);
    // Two copies of the loop, so that the one interior blocks run holds no
    // predicated loads (and their registers) at all: with both loaders in
    // one loop the compiler predicates instead of branching, and a warp
    // issues the unused loader's instructions every k-tile.
    const bool full = kVec && full_tiles == k_tiles && p.k % S::kBK == 0;
    if constexpr (S::kInPlaceFrags) {
      if (full) {
        InPlaceLoop<kVec>(acc, p, smem, smem_b, offs_a, offs_b, load_a, load_b);
      } else {
        InPlaceLoop<false>(acc, p, smem, smem_b, offs_a, offs_b, load_a,
                           load_b);
      }
    } else {
      if (full) {
        PairLoop<kVec>(acc, p, smem, smem_b, offs_a, offs_b, load_a, load_b);
      } else {
        PairLoop<false>(acc, p, smem, smem_b, offs_a, offs_b, load_a, load_b);
      }
    }
  }

  // Main loop of the warp tiles up to 64x64: two full sets of fragments,
  // the next k16 step's loaded while this one's MMAs run. The loads of
  // k-tile kt + kStages - 1 go out at the first step of k-tile kt; one
  // wait and barrier per k-tile, before its last step.
  // kFull: every k-tile of this block is wholly in range (LoadFull only).
  template <bool kFull, class LoaderA, class LoaderB>
  __device__ __forceinline__ static void PairLoop(
      float (&acc)[S::kMI][S::kNJ][4], const KernelParams& p, uint32_t smem,
      uint32_t smem_b, const OffsetsA& oa, const OffsetsB& ob, LoaderA& load_a,
      LoaderB& load_b) {
    const int k_tiles = (p.k + S::kBK - 1) / S::kBK;
    Frags frags[2];
    int read = 0;
    int write = S::kStages - 1;
    W::LoadFrags(frags[0], smem, smem_b, oa, ob, 0);

    for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll
      for (int kk = 0; kk < S::kKSteps; ++kk) {
        if (kk == S::kKSteps - 1) {
          // The next stage must have landed, and every warp must be done
          // with the stage that the next cp.async batch overwrites.
          CpAsyncWait<S::kStages - 2>();
          __syncthreads();
          read = (read + 1 == S::kStages) ? 0 : read + 1;
        }
        const int next = (kk + 1) % S::kKSteps;
        W::LoadFrags(frags[(kk + 1) % 2], smem + read * S::kStageBytesA,
                     smem_b + read * S::kStageBytesB, oa, ob, next);
        if (kk == 0) {
          // Issue the loads of k-tile kt + kStages - 1 before this tile's
          // MMAs, into the stage consumed during k-tile kt - 1.
          if (kt + S::kStages - 1 < k_tiles) {
            LoadTile<kFull>(p, kt + S::kStages - 1,
                            smem + write * S::kStageBytesA,
                            smem_b + write * S::kStageBytesB, load_a, load_b);
          }
          CpAsyncCommit();
          write = (write + 1 == S::kStages) ? 0 : write + 1;
        }
        W::Mmas(acc, frags[kk % 2]);
      }
    }
    CpAsyncWait<0>();
  }

  // Main loop of the large warp tiles, in WarpTile's in-place order; the
  // k-tile's wait and barrier sit before the last row of the last step.
  // kFull: every k-tile of this block is wholly in range (LoadFull only).
  template <bool kFull, class LoaderA, class LoaderB>
  __device__ __forceinline__ static void InPlaceLoop(
      float (&acc)[S::kMI][S::kNJ][4], const KernelParams& p, uint32_t smem,
      uint32_t smem_b, const OffsetsA& oa, const OffsetsB& ob, LoaderA& load_a,
      LoaderB& load_b) {
    const int k_tiles = (p.k + S::kBK - 1) / S::kBK;
    InPlaceFrags f;
    int read = 0;
    W::FirstInPlaceFrags(f, smem, smem_b, oa, ob);
    for (int kt = 0; kt < k_tiles; ++kt) {
      W::InPlaceTile(
          acc, f, smem, smem_b, oa, ob, read,
          [&](int kk) {
            if (kk != 0) return;
            // Loads of k-tile kt + kStages - 1, into the stage consumed
            // during k-tile kt - 1 (every warp passed the barrier after
            // reading it).
            if (kt + S::kStages - 1 < k_tiles) {
              const int write = read == 0 ? S::kStages - 1 : read - 1;
              LoadTile<kFull>(p, kt + S::kStages - 1,
                              smem + write * S::kStageBytesA,
                              smem_b + write * S::kStageBytesB, load_a, load_b);
            }
            CpAsyncCommit();
          },
          [&] {
            // Step 0 of k-tile kt + 1 reads the next stage: it must have
            // landed, and (for the cp.async batch issued at kt + 1) every
            // warp must be done with this one.
            CpAsyncWait<S::kStages - 2>();
            __syncthreads();
            return read + 1 == S::kStages ? 0 : read + 1;
          });
    }
    CpAsyncWait<0>();
  }
};

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_CP_ASYNC_MAINLOOP_CUH_
