// TileLoader: the per-thread global->shared copies of one operand's k-tile
// for the cp.async kernels (16-byte cp.async with zero fill) and the
// unaligned fallback (2-byte loads and shared stores). It owns the
// per-thread source pointer and the range bookkeeping that turns tails into
// zeros; where the bytes land is SmemTile's business (smem_tile.cuh). The
// TMA kernel does not use it: the copy engine issues whole boxes
// (tma_mainloop.cuh).
#ifndef MATMUL_KERNELS_MMA_INTERNAL_TILE_LOADER_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_TILE_LOADER_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/params.h"
#include "kernels/mma/internal/ptx.cuh"
#include "kernels/mma/internal/smem_tile.cuh"

namespace matmul::mma::internal {

// Copies one operand's block_k slice (kMN x kBK elements) into a stage,
// advancing along K on each Advance(). Out-of-range elements become zeros.
// kVec: 16-byte cp.async (needs 16-byte aligned chunks); otherwise
// predicated 2-byte loads and 16-byte shared stores, for any alignment.
template <Major kMajor, int kMN, int kBK, int kThreads, bool kVec,
          bool kLean = false>
struct TileLoader {
  using Tile = SmemTile<kMajor, kMN, kBK>;
  static constexpr int kChunks = kMN * kBK / 8;
  static_assert(kChunks % kThreads == 0, "whole chunks per thread");
  // Each thread keeps one chunk column. Rows whose chunk count does not
  // divide the thread count (384-byte rows: 192 MN-major elements) are cut
  // into 128-byte groups of 8 chunks; a thread then copies the same chunk of
  // every group, which keeps the swizzle key and all offsets immediates.
  static constexpr bool kGrouped = kThreads % Tile::kChunksPerRow != 0;
  static constexpr int kGroupChunks = kGrouped ? 8 : Tile::kChunksPerRow;
  static constexpr int kGroups = Tile::kChunksPerRow / kGroupChunks;
  static_assert(!kGrouped || Tile::kRowBytes % 128 == 0, "grouped rows");
  static_assert(kThreads % kGroupChunks == 0, "fixed chunk per thread");
  static constexpr int kRowStep = kThreads / kGroupChunks;
  static_assert(Tile::kRows % kRowStep == 0, "whole row steps");
  static constexpr int kIters = Tile::kRows / kRowStep;  // per group

  // The large warp tiles (kLean) keep three registers: the pointer and the
  // rows (A) or columns (B) of the block in range; the rest is recomputed
  // from threadIdx and the k-tile index. The others keep four, updated per
  // k-tile, which their register budget affords and which saves
  // recomputing them.
  const uint16_t* ptr;  // this thread's first chunk at the current k-tile
  int rows_left;        // !kLean: stored rows still in range at this k-tile
  int elems_left;       // !kLean: elements in range from the chunk's start
  int mn_left;          // kLean: rows (A) or columns (B) of the block in range

  __device__ __forceinline__ static int Row0() {
    return threadIdx.x / kGroupChunks;
  }
  __device__ __forceinline__ static int Chunk() {
    return threadIdx.x % kGroupChunks;
  }

  // base: the operand's [0,0] for this batch entry; ld: its non-unit stride;
  // mn0: first row (A) or column (B) of the block; mn_size: m or n.
  __device__ __forceinline__ TileLoader(const uint16_t* base, int64_t ld,
                                        int mn0, int mn_size, int k_size) {
    if constexpr (kLean) mn_left = mn_size - mn0;
    if constexpr (kMajor == Major::kK) {
      // stored rows are m (or n), chunks run along k
      ptr = base + (static_cast<int64_t>(mn0) + Row0()) * ld + Chunk() * 8;
      if constexpr (!kLean) {
        rows_left = mn_size - mn0;
        elems_left = k_size - Chunk() * 8;
      }
    } else {
      // stored rows are k, chunks run along m (or n)
      ptr = base + static_cast<int64_t>(Row0()) * ld + mn0 + Chunk() * 8;
      if constexpr (!kLean) {
        rows_left = k_size;
        elems_left = mn_size - mn0 - Chunk() * 8;
      }
    }
  }

  __device__ __forceinline__ void Advance(int64_t ld) {
    if constexpr (kMajor == Major::kK) {
      ptr += kBK;
      if constexpr (!kLean) elems_left -= kBK;
    } else {
      ptr += kBK * ld;
      if constexpr (!kLean) rows_left -= kBK;
    }
  }

  // Tiles wholly in range (every k-tile but a ragged last one, in blocks
  // away from the M/N edges) skip all predicates and size operands: chunk
  // i's source is one IMAD.WIDE from the thread's pointer (CanImplement
  // keeps kRowStep * ld * 2 bytes under 2^32) and its destination an
  // immediate offset, which leaves the main loop few non-MMA instructions.
  __device__ __forceinline__ void LoadFull(uint32_t stage, int64_t ld) const {
    static_assert(kVec, "the full-tile path is the 16-byte one");
    const int row0 = Row0();
    const int chunk = Chunk();
    const uint32_t step_bytes = static_cast<uint32_t>(kRowStep * ld * 2);
    constexpr bool kLinear =
        Tile::kRowBytes >= 128 ? kRowStep % 8 == 0 : kRowStep % 16 == 0;
    const uint32_t dst0 = stage + Tile::Offset(row0, chunk);
    const char* base = reinterpret_cast<const char*>(ptr);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
#pragma unroll
      for (int i = 0; i < kIters; ++i) {
        const uint32_t dst =
            (kLinear ? dst0 + i * kRowStep * Tile::kRowBytes
                     : stage + Tile::Offset(row0 + i * kRowStep, chunk)) +
            g * 128;
        CpAsync16Full(dst,
                      base + static_cast<uint64_t>(i) * step_bytes + g * 128);
      }
    }
  }

  // k_left: elements of K in range from this k-tile's start.
  __device__ __forceinline__ void Load(uint32_t stage, int64_t ld,
                                       int k_left) const {
    const int row0 = Row0();
    const int chunk = Chunk();
    // Stored rows in range, and elements in range from the chunk's start.
    const int rows_left = !kLean                ? this->rows_left
                          : kMajor == Major::kK ? mn_left
                                                : k_left;
    const int elems_left =
        !kLean ? this->elems_left
               : (kMajor == Major::kK ? k_left : mn_left) - chunk * 8;
    const int chunk_elems = min(max(elems_left, 0), 8);
    const int64_t step = static_cast<int64_t>(kRowStep) * ld;
    // Moving kRowStep rows keeps the swizzle key when it is a multiple of 8
    // rows (16 for 64-byte rows): then chunk i's offset is an immediate.
    constexpr bool kLinear =
        Tile::kRowBytes >= 128 ? kRowStep % 8 == 0 : kRowStep % 16 == 0;
    const uint32_t dst0 = stage + Tile::Offset(row0, chunk);
#pragma unroll
    for (int gi = 0; gi < kGroups * kIters; ++gi) {
      const int g = gi / kIters;
      const int i = gi % kIters;
      const uint16_t* src = ptr + i * step + g * 64;
      const int row = row0 + i * kRowStep;
      const uint32_t dst = (kLinear ? dst0 + i * kRowStep * Tile::kRowBytes
                                    : stage + Tile::Offset(row, chunk)) +
                           g * 128;
      const int group_elems =
          kGroups == 1 ? chunk_elems : min(max(elems_left - g * 64, 0), 8);
      const int bytes = row < rows_left ? group_elems * 2 : 0;
      if constexpr (kVec) {
        // With 0 bytes nothing is read (the address may be out of range)
        // and the 16 bytes are zero-filled.
        CpAsync16(dst, src, bytes);
      } else {
        // One element at a time, any alignment.
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          unsigned short v = 0;
          if (2 * e < bytes) {
            v = __ldg(reinterpret_cast<const unsigned short*>(src) + e);
          }
          StoreShared2(dst + 2 * e, v);
        }
      }
    }
  }
};

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_TILE_LOADER_CUH_
