// The shared-memory layout of one pipeline stage: where each 16-byte chunk
// of an operand tile lives, and why.
//
// Each operand tile is kept in the orientation it has in global memory, so
// every global load is a 16-byte copy of 8 contiguous elements:
//   K-major operand (A "N", B "T"):  [mn rows][block_k]   -> ldmatrix
//   MN-major operand (A "T", B "N"): [block_k rows][mn]   -> ldmatrix.trans
// Rows are split into 16-byte chunks and each 128-byte line's chunks are
// XOR-permuted by the row index, so that the 8 row addresses of one ldmatrix
// phase and the 8 chunks of one cp.async phase fall in 8 different 16-byte
// bank groups: no bank conflicts on either side. The TMA kernel stores the
// same swizzle in 128-byte panels, the layout the copy engine writes.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_SMEM_TILE_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_SMEM_TILE_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/params.h"

namespace matmul::mma::internal {

// Row sizes the swizzled layout handles: 64 bytes (two rows share a
// 128-byte line) or whole 128-byte lines.
constexpr bool IsSharedRowSize(int row_bytes) {
  return row_bytes == 64 || row_bytes % 128 == 0;
}

// One operand's tile of one stage: kRows rows of kRowBytes bytes.
// kPanels (the TMA kernel): rows of more than 128 bytes are stored as
// panels of 64 contiguous elements, each panel kRows lines of 128 bytes,
// which is what one copy-engine box with 128-byte swizzle writes (its
// swizzle is this XOR of the chunk by row % 8, on 1024-byte aligned panels).
template <Major kMajor, int kMN, int kBK, bool kPanels = false>
struct SmemTile {
  static constexpr int kRows = kMajor == Major::kK ? kMN : kBK;
  static constexpr int kRowBytes = (kMajor == Major::kK ? kBK : kMN) * 2;
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static_assert(IsSharedRowSize(kRowBytes), "row size");
  static_assert(!kPanels || kRowBytes % 128 == 0, "panels of 128 bytes");
  static constexpr int kPanelBytes = kRows * 128;
  // Bytes from one row to the next.
  static constexpr int kRowPitch = kPanels ? 128 : kRowBytes;

  // Byte offset of 16-byte chunk `chunk` of row `row`. Rows of >= 128 bytes
  // permute the chunks of each 128-byte line by row % 8; 64-byte rows pair
  // up into one 128-byte line permuted by (row / 2) % 8.
  __device__ __forceinline__ static uint32_t Offset(int row, int chunk) {
    if constexpr (kPanels) {
      return (chunk >> 3) * kPanelBytes + row * 128 +
             (((chunk ^ row) & 7) << 4);
    } else if constexpr (kRowBytes >= 128) {
      return row * kRowBytes + (((chunk & ~7) | ((chunk ^ row) & 7)) << 4);
    } else {
      const int g = row * 4 + chunk;
      const int line = g >> 3;
      return (line << 7) + (((g ^ line) & 7) << 4);
    }
  }
};

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_SMEM_TILE_CUH_
