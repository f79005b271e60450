// The compiled tile configs, in one X-macro list so the host table and the
// kernel instantiations cannot drift apart. Columns:
//   block_m, block_n, block_k, stages, warps_m, warps_n, group_m,
//   min_blocks (blocks per SM the kernel's registers must allow; 3 for the
//   small-tile configs meant to run 3 per SM on parts with 228 KiB),
//   tma_min_blocks (the same for the config's TMA kernel, which has no
//   loader registers: 3 lets 128x128 run 12 warps per SM, with fragments
//   refilled in place; see TileShape::kInPlaceFrags)
// Shared bytes = (block_m + block_n) * block_k * 2 * stages; the GB10 limit
// is 101,376 per block (the first entry does not fit: it is the seed's
// 144 KiB config, kept for parts with more shared memory). The 192x128
// entries have 96x64 warp tiles, which run the in-place fragment main loop
// (WarpTile::InPlaceTile). 160x64 (80x32 warp tiles) splits 5120x512 into 256
// tiles, two per SM on 132 SMs where 128x64's 320 leave some SMs three and
// others two; its 160-element rows exist only K-major, so it has kernels for
// the NN and NT layouts alone (kHasCpAsyncKernel).
#ifndef MATMUL_KERNELS_MMA_INTERNAL_CONFIGS_H_
#define MATMUL_KERNELS_MMA_INTERNAL_CONFIGS_H_

#define MATMUL_MMA_CONFIGS(X)       \
  X(128, 256, 64, 3, 2, 4, 8, 1, 1) \
  X(128, 256, 64, 2, 2, 4, 8, 1, 1) \
  X(128, 256, 32, 4, 2, 4, 8, 1, 1) \
  X(256, 128, 64, 2, 4, 2, 8, 1, 1) \
  X(256, 128, 32, 4, 4, 2, 8, 1, 1) \
  X(128, 128, 64, 3, 2, 2, 8, 1, 1) \
  X(128, 128, 64, 2, 2, 2, 8, 1, 3) \
  X(128, 128, 32, 4, 2, 2, 8, 1, 1) \
  X(192, 128, 64, 2, 2, 2, 8, 1, 1) \
  X(192, 128, 32, 4, 2, 2, 8, 1, 1) \
  X(128, 64, 128, 2, 2, 2, 8, 1, 1) \
  X(128, 64, 64, 3, 2, 2, 8, 3, 3)  \
  X(64, 128, 64, 3, 2, 2, 8, 3, 3)  \
  X(160, 64, 64, 3, 2, 2, 8, 2, 2)  \
  X(64, 64, 64, 2, 2, 2, 8, 1, 1)

#endif  // MATMUL_KERNELS_MMA_INTERNAL_CONFIGS_H_
