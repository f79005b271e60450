// TmaMainloop: the pipelined k-loop of the copy-engine (TMA) kernel,
// sm_90 and later. One thread issues each k-tile as copy-engine boxes that
// complete on the stage's `full` mbarrier; each warp waits for that barrier
// alone and, once its MMAs have consumed the stage's last fragments,
// arrives on the stage's `empty` barrier, which the issuing thread waits
// for before it reuses the stage. No block-wide barrier, no per-thread
// copies or predicates: the copy engine zero-fills tails. Shared memory is
// in SmemTile's panel layout, the one the copy engine's 128-byte swizzle
// writes.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_TMA_MAINLOOP_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_TMA_MAINLOOP_CUH_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/params.h"
#include "kernels/mma/internal/ptx.cuh"
#include "kernels/mma/internal/warp_tile.cuh"

namespace matmul::mma::internal {

template <class S, Major kA, Major kB>
struct TmaMainloop {
  using W = WarpTile<S, kA, kB, /*kPanels=*/true>;
  using TileA = typename W::TileA;
  using TileB = typename W::TileB;
  using Frags = typename W::Frags;
  using OffsetsA = typename W::OffsetsA;
  using OffsetsB = typename W::OffsetsB;
  using InPlaceFrags = typename W::InPlaceFrags;

  static constexpr int kWarps = S::kWM * S::kWN;

  // One operand's boxes of the k-tile at k0 into the stage at dst: one per
  // 64 contiguous elements of its rows (SmemTile panels); mn0 is the
  // block's first row (A) or column (B).
  template <Major kMajor, class Tile>
  __device__ __forceinline__ static void IssueOperand(uint32_t dst,
                                                      const CUtensorMap* map,
                                                      int mn0, int k0,
                                                      uint32_t full) {
#pragma unroll
    for (int q = 0; q < Tile::kRowBytes / 128; ++q) {
      if constexpr (kMajor == Major::kK) {
        TmaLoad2d(dst + q * Tile::kPanelBytes, map, k0 + 64 * q, mn0, full);
      } else {
        TmaLoad2d(dst + q * Tile::kPanelBytes, map, mn0 + 64 * q, k0, full);
      }
    }
  }

  // The boxes of k-tile `tile` into the stage at dst_a / dst_b.
  __device__ __forceinline__ static void IssueTile(const KernelParams& p,
                                                   int tile, int m0, int n0,
                                                   uint32_t dst_a,
                                                   uint32_t dst_b,
                                                   uint32_t full) {
    MbarArriveExpectTx(full, S::kStageBytesA + S::kStageBytesB);
    IssueOperand<kA, TileA>(dst_a, &p.tma_a, m0, tile * S::kBK, full);
    IssueOperand<kB, TileB>(dst_b, &p.tma_b, n0, tile * S::kBK, full);
  }

  // Addresses of the TMA kernel's shared memory (smem: 1024-byte aligned,
  // as the copy engine's 128-byte swizzle repeats every 1024 bytes): the
  // stages of A, those of B, then full[s] and empty[s], 8 bytes each.
  struct TmaStages {
    uint32_t a;  // stage s of A at a + s * kStageBytesA
    __device__ __forceinline__ uint32_t B() const {
      return a + S::kStages * S::kStageBytesA;
    }
    __device__ __forceinline__ uint32_t Full(int s) const {
      return B() + S::kStages * S::kStageBytesB + 8 * s;
    }
    __device__ __forceinline__ uint32_t Empty(int s) const {
      return Full(S::kStages + s);
    }
  };

  // Initialises the barriers and puts k-tiles 0 .. kStages-2 in flight.
  __device__ __forceinline__ static void TmaStart(const KernelParams& p,
                                                  const TmaStages& st, int m0,
                                                  int n0, int k_tiles) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < S::kStages; ++s) {
        MbarInit(st.Full(s), 1);
        MbarInit(st.Empty(s), kWarps);
      }
      FenceMbarInit();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
      for (int s = 0; s < S::kStages - 1; ++s) {
        if (s < k_tiles) {
          IssueTile(p, s, m0, n0, st.a + s * S::kStageBytesA,
                    st.B() + s * S::kStageBytesB, st.Full(s));
        }
      }
    }
  }

  // The next tile's loads go out one step into the current one when the
  // ring has room for it (3+ stages), so the issuing thread rarely waits
  // for a warp still reading the stage it refills.
  static constexpr int kIssueStep = S::kStages > 2 ? 1 : 0;

  // Thread 0, at step kIssueStep of k-tile kt: k-tile kt + kStages - 1
  // refills the stage that k-tile kt - 1 used, once every warp released it.
  __device__ __forceinline__ static void TmaRefill(const KernelParams& p,
                                                   const TmaStages& st, int m0,
                                                   int n0, int kt,
                                                   int k_tiles) {
    const int t = kt + S::kStages - 1;
    if (t < k_tiles) {
      const int w = t % S::kStages;
      if (t >= S::kStages) MbarWait(st.Empty(w), ((t / S::kStages) & 1) ^ 1);
      IssueTile(p, t, m0, n0, st.a + w * S::kStageBytesA,
                st.B() + w * S::kStageBytesB, st.Full(w));
    }
  }

  // Before reading k-tile kt + 1 (stage `read`, already advanced): the
  // ((kt + 1) / kStages)-th fill of that stage must have landed.
  __device__ __forceinline__ static void TmaAwait(const TmaStages& st, int read,
                                                  int kt, int k_tiles) {
    if (kt + 1 < k_tiles) {
      MbarWait(st.Full(read), ((kt + 1) / S::kStages) & 1);
    }
  }

  // After k-tile kt's MMAs, which needed its stage's last fragments in
  // registers: this warp has finished reading the stage.
  __device__ __forceinline__ static void TmaRelease(const TmaStages& st,
                                                    int done) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) MbarArrive(st.Empty(done));
  }

  // The main loop: two fragment sets (as CpAsyncMainloop::PairLoop) or,
  // where the registers do not allow them, fragments refilled in place
  // (WarpTile's in-place order).
  __device__ __forceinline__ static void TmaLoop(
      float (&acc)[S::kMI][S::kNJ][4], const KernelParams& p, int m0, int n0,
      uint32_t smem) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const TmaStages st{smem};
    const uint32_t smem_b = st.B();
    const int k_tiles = (p.k + S::kBK - 1) / S::kBK;
    TmaStart(p, st, m0, n0, k_tiles);
    const OffsetsA oa((warp / S::kWN) * S::kWTM, lane);
    const OffsetsB ob((warp % S::kWN) * S::kWTN, lane);
    int read = 0;
    MbarWait(st.Full(0), 0);
    if constexpr (S::kInPlaceFrags) {
      InPlaceFrags f;
      W::FirstInPlaceFrags(f, smem, smem_b, oa, ob);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int done = read;
        W::InPlaceTile(
            acc, f, smem, smem_b, oa, ob, read,
            [&](int kk) {
              if (kk == kIssueStep && threadIdx.x == 0) {
                TmaRefill(p, st, m0, n0, kt, k_tiles);
              }
            },
            [&] {
              const int next = read + 1 == S::kStages ? 0 : read + 1;
              TmaAwait(st, next, kt, k_tiles);
              return next;
            });
        TmaRelease(st, done);
      }
    } else {
      Frags frags[2];
      W::LoadFrags(frags[0], smem, smem_b, oa, ob, 0);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int done = read;
#pragma unroll
        for (int kk = 0; kk < S::kKSteps; ++kk) {
          if (kk == S::kKSteps - 1) {
            read = (read + 1 == S::kStages) ? 0 : read + 1;
            TmaAwait(st, read, kt, k_tiles);
          }
          const int next = (kk + 1) % S::kKSteps;
          W::LoadFrags(frags[(kk + 1) % 2], smem + read * S::kStageBytesA,
                       smem_b + read * S::kStageBytesB, oa, ob, next);
          if (kk == kIssueStep && threadIdx.x == 0) {
            TmaRefill(p, st, m0, n0, kt, k_tiles);
          }
          W::Mmas(acc, frags[kk % 2]);
        }
        TmaRelease(st, done);
      }
    }
  }
};

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_TMA_MAINLOOP_CUH_
