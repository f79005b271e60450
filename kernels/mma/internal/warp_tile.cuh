// WarpTile: one warp's share of the block tile, from shared memory to the
// accumulators. It holds the fragment registers of one k16 step, the
// per-thread ldmatrix offsets into a stage (swizzle included), the MMAs in
// serpentine order, and the in-place fragment order of the large warp
// tiles. Both main loops (cp_async_mainloop.cuh, tma_mainloop.cuh) drive
// it; it knows nothing of how a stage was filled.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_WARP_TILE_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_WARP_TILE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/params.h"
#include "kernels/mma/internal/ptx.cuh"
#include "kernels/mma/internal/smem_tile.cuh"

namespace matmul::mma::internal {

// kPanels: shared memory in the TMA kernel's panel layout (SmemTile).
template <class S, Major kA, Major kB, bool kPanels = false>
struct WarpTile {
  using TileA = SmemTile<kA, S::kBM, S::kBK, kPanels>;
  using TileB = SmemTile<kB, S::kBN, S::kBK, kPanels>;

  // Fragments of one k16 step: A as m16k16 blocks, B as pairs of n8k16.
  struct Frags {
    uint32_t a[S::kMI][4];
    uint32_t b[S::kNJ][2];
  };

  // ldmatrix.x4 addresses one 16(mn) x 16(k) block; lane l supplies the
  // address of row (l & 7) of 8x8 matrix q = l / 8. For A the matrices are
  // ordered (mn half q & 1, k half q >> 1), the m16n8k16 A fragment order;
  // for B (kBOrder) (mn half q >> 1, k half q & 1), so that registers 0-1
  // and 2-3 are ready-made (b0, b1) pairs of two n8 fragments: no moves.
  template <Major kMajor, class Tile, bool kBOrder>
  __device__ __forceinline__ static uint32_t FragOffset(int mn, int kk,
                                                        int lane) {
    const int q = lane >> 3;
    const int r = lane & 7;
    const int mn_half = kBOrder ? (q >> 1) : (q & 1);
    const int k_half = kBOrder ? (q & 1) : (q >> 1);
    if constexpr (kMajor == Major::kK) {
      return Tile::Offset(mn + mn_half * 8 + r, kk * 2 + k_half);
    } else {
      return Tile::Offset(kk * 16 + k_half * 8 + r, (mn >> 3) + mn_half);
    }
  }

  // Per-thread ldmatrix offsets within a stage, computed once. A K-major
  // tile's offset for fragment i at step kk is off[kk] + i * 16 rows (moving
  // 16 rows keeps row % 8, so the swizzle is unchanged); an MN-major tile's
  // is off[i] + kk * 16 rows. Either way the second term is an immediate,
  // which keeps the main loop's address registers to a handful.
  template <Major kMajor, class Tile, int kFrags, bool kBOrder, int kWarpMN>
  struct FragOffsets {
    // The large warp tiles have no registers for a table. For rows of >= 128
    // bytes, Offset(row, c) = (row * kRowBytes + 16 * c) ^ (16 * (row & 7)):
    // the XOR only touches bits 4-6, where row * kRowBytes has zeros. The
    // chunk index that varies (2 * kk + k_half along K, 2 * frag + mn_half
    // along MN) then moves the sum by 32 per step, so an offset is one
    // register and an immediate: XOR (within one 128-byte line, kk < 4 or
    // warp origins on 64-element lines) or add-then-XOR with a second
    // register holding the row key (96-element warp tiles along MN).
    static constexpr bool kCompact = S::kInPlaceFrags;
    static constexpr bool kXorOnly =
        kMajor == Major::kK ? S::kKSteps <= 4 : kWarpMN % 64 == 0;
    static_assert(!kCompact || Tile::kRowBytes >= 128 ||
                      (kMajor == Major::kK && S::kKSteps <= 2),
                  "compact offsets");
    // Panels keep the XOR form while a warp's fragments stay within one
    // 128-byte line of a row (64 elements along MN, 4 k16 steps along K).
    static_assert(!kCompact || !kPanels ||
                      (kXorOnly && (kMajor == Major::kK || kWarpMN == 64)),
                  "compact offsets across panels");
    static constexpr int kCount =
        kCompact ? (kXorOnly ? 1 : 2)
                 : (kMajor == Major::kK ? S::kKSteps : kFrags);
    uint32_t off[kCount];
    __device__ __forceinline__ FragOffsets(int mn0, int lane) {
      if constexpr (kCompact && !kXorOnly) {
        static_assert(kMajor == Major::kMN, "K-major takes the XOR form");
        const int row =
            (kBOrder ? (lane >> 3) & 1 : lane >> 4) * 8 + (lane & 7);
        const int mn_half = kBOrder ? lane >> 4 : (lane >> 3) & 1;
        off[1] = (row & 7) << 4;
        off[0] = row * Tile::kRowBytes + (((mn0 >> 3) + mn_half) << 4);
      } else {
#pragma unroll
        for (int x = 0; x < kCount; ++x) {
          off[x] =
              kMajor == Major::kK
                  ? FragOffset<kMajor, Tile, kBOrder>(mn0, x, lane)
                  : FragOffset<kMajor, Tile, kBOrder>(mn0 + 16 * x, 0, lane);
        }
      }
    }
    // XOR form: x (< 4) flips bits 5-6 of the chunk within its line.
    __device__ __forceinline__ static uint32_t Flip(uint32_t base, int x) {
      return (base ^ ((x & 3) << 5)) + (x >> 2) * 128;
    }
    __device__ __forceinline__ uint32_t Get(int frag, int kk) const {
      if constexpr (kCompact && !kXorOnly) {
        return ((off[0] + 32 * frag) ^ off[1]) + kk * 16 * Tile::kRowBytes;
      } else if constexpr (kCompact && kMajor == Major::kK) {
        return Flip(off[0], kk) + frag * 16 * Tile::kRowPitch;
      } else if constexpr (kCompact) {
        return Flip(off[0], frag) + kk * 16 * Tile::kRowPitch;
      } else if constexpr (kMajor == Major::kK) {
        return off[kk] + frag * 16 * Tile::kRowPitch;
      } else {
        return off[frag] + kk * 16 * Tile::kRowPitch;
      }
    }
  };
  using OffsetsA = FragOffsets<kA, TileA, S::kMI, false, S::kWTM>;
  using OffsetsB = FragOffsets<kB, TileB, S::kNJ / 2, true, S::kWTN>;

  __device__ __forceinline__ static void LoadFrags(Frags& f, uint32_t stage_a,
                                                   uint32_t stage_b,
                                                   const OffsetsA& oa,
                                                   const OffsetsB& ob, int kk) {
#pragma unroll
    for (int i = 0; i < S::kMI; ++i) {
      Ldmatrix4<kA == Major::kMN>(f.a[i], stage_a + oa.Get(i, kk));
    }
#pragma unroll
    for (int j = 0; j < S::kNJ / 2; ++j) {
      Ldmatrix4x2<kB == Major::kMN>(f.b[2 * j], f.b[2 * j + 1],
                                    stage_b + ob.Get(j, kk));
    }
  }

  __device__ __forceinline__ static void Mmas(float (&acc)[S::kMI][S::kNJ][4],
                                              const Frags& f) {
#pragma unroll
    for (int i = 0; i < S::kMI; ++i) {
#pragma unroll
      for (int jj = 0; jj < S::kNJ; ++jj) {
        // serpentine order: consecutive MMAs share an operand
        const int j = (i % 2) ? S::kNJ - 1 - jj : jj;
        MmaBf16(acc[i][j], f.a[i], f.b[j]);
      }
    }
  }

  // The in-place order, for the warp tiles whose registers cannot afford
  // two full sets of fragments (S::kInPlaceFrags: 96x64 warps, 64x64 warps
  // at 3 blocks per SM). A is double-buffered by row: the ldmatrix of row i + 1
  // is issued before row i's MMAs (NJ MMAs of cover), so two A fragments are
  // live instead of kMI. B is refilled in place: each pair right after its MMA
  // in the step's last row. Rows run in serpentine order with the direction set
  // by (i + kk) parity (kMI and kKSteps are even), so the next step's first row
  // starts with the B pair that was refilled first. The k-tile's wait sits
  // before the last row of the last step, when kMI - 1 rows of MMAs are queued
  // behind it.
  //
  // Its fragments: two A rows and every B pair.
  struct InPlaceFrags {
    uint32_t a[2][4];
    uint32_t b[S::kNJ][2];
  };

  // Row 0 of A and all of B for step 0 of k-tile 0 (stage 0).
  __device__ __forceinline__ static void FirstInPlaceFrags(InPlaceFrags& f,
                                                           uint32_t smem,
                                                           uint32_t smem_b,
                                                           const OffsetsA& oa,
                                                           const OffsetsB& ob) {
    Ldmatrix4<kA == Major::kMN>(f.a[0], smem + oa.Get(0, 0));
#pragma unroll
    for (int j = 0; j < S::kNJ / 2; ++j) {
      Ldmatrix4x2<kB == Major::kMN>(f.b[2 * j], f.b[2 * j + 1],
                                    smem_b + ob.Get(j, 0));
    }
  }

  // One k-tile in the in-place order from stage `read`. on_step(kk) runs at
  // the start of each k16 step (the pipeline's loads); next_stage() runs
  // before the last row of the last step, whose refills read k-tile
  // kt + 1, and returns that tile's stage (it must have landed).
  template <class OnStep, class NextStage>
  __device__ __forceinline__ static void InPlaceTile(
      float (&acc)[S::kMI][S::kNJ][4], InPlaceFrags& f, uint32_t smem,
      uint32_t smem_b, const OffsetsA& oa, const OffsetsB& ob, int& read,
      OnStep&& on_step, NextStage&& next_stage) {
#pragma unroll
    for (int kk = 0; kk < S::kKSteps; ++kk) {
      on_step(kk);
      const int next = (kk + 1) % S::kKSteps;
#pragma unroll
      for (int i = 0; i < S::kMI; ++i) {
        if (i + 1 < S::kMI) {
          Ldmatrix4<kA == Major::kMN>(
              f.a[(i + 1) & 1],
              smem + read * S::kStageBytesA + oa.Get(i + 1, kk));
        } else {
          if (kk == S::kKSteps - 1) read = next_stage();
          Ldmatrix4<kA == Major::kMN>(
              f.a[0], smem + read * S::kStageBytesA + oa.Get(0, next));
        }
        const bool forward = ((i + kk) & 1) == 0;
#pragma unroll
        for (int jj = 0; jj < S::kNJ; ++jj) {
          const int j = forward ? jj : S::kNJ - 1 - jj;
          MmaBf16(acc[i][j], f.a[i & 1], f.b[j]);
          if (i == S::kMI - 1 && (j & 1) == (forward ? 1 : 0)) {
            const int pair = j >> 1;
            Ldmatrix4x2<kB == Major::kMN>(
                f.b[2 * pair], f.b[2 * pair + 1],
                smem_b + read * S::kStageBytesB + ob.Get(pair, next));
          }
        }
      }
    }
  }
};

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_WARP_TILE_CUH_
