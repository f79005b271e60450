// TileShape: the compile-time description of one tile config (threadblock
// tile, warp grid, pipeline depth, rasterisation group, launch bounds) and
// the quantities every other kernel header derives from it. Plain C++ so
// that it reads on its own; the configs themselves are listed in
// configs.h.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_TILE_SHAPE_H_
#define MATMUL_KERNELS_MMA_INTERNAL_TILE_SHAPE_H_

namespace matmul::mma::internal {

template <int kBM_, int kBN_, int kBK_, int kStages_, int kWM_, int kWN_,
          int kGroupM_, int kMinBlocks_ = 1>
struct TileShape {
  // Blocks per SM the register allocation must allow (launch bounds).
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kBM = kBM_;
  static constexpr int kBN = kBN_;
  static constexpr int kBK = kBK_;
  static constexpr int kStages = kStages_;
  static constexpr int kWM = kWM_;
  static constexpr int kWN = kWN_;
  static constexpr int kGroupM = kGroupM_;
  static constexpr int kThreads = kWM * kWN * 32;
  static constexpr int kWTM = kBM / kWM;  // warp tile
  static constexpr int kWTN = kBN / kWN;
  static constexpr int kMI = kWTM / 16;  // m16 fragments per warp
  static constexpr int kNJ = kWTN / 8;   // n8 fragments per warp
  static constexpr int kKSteps = kBK / 16;
  static constexpr int kStageBytesA = kBM * kBK * 2;
  static constexpr int kStageBytesB = kBN * kBK * 2;
  static constexpr int kSharedBytes = (kStageBytesA + kStageBytesB) * kStages;
  static_assert(kWTM % 16 == 0 && kWTN % 16 == 0, "warp tile of 16x16s");
  static_assert(kBK % 32 == 0, "block_k >= 32 (64-byte rows) for the swizzle");
  static_assert(kKSteps >= 2, "the fragment pipeline needs two k-steps");
  // Registers per thread that kMinBlocks blocks per SM leave (64K per SM).
  static constexpr int kRegBudget = 65536 / (kThreads * kMinBlocks) < 255
                                        ? 65536 / (kThreads * kMinBlocks)
                                        : 255;
  // Tiles whose accumulators, two sets of fragments and about 48 registers
  // of addresses and counters exceed that budget (96x64 warps: 192
  // accumulators; 64x64 warps at 3 blocks per SM: 170 registers) refill one
  // set in place, each fragment right after its last MMA of the step (see
  // WarpTile::InPlaceTile).
  static constexpr bool kInPlaceFrags =
      kMI * kNJ * 4 + 2 * (kMI * 4 + kNJ * 2) + 48 > kRegBudget;
  static_assert(!kInPlaceFrags || (kMI % 2 == 0 && kKSteps % 2 == 0),
                "in-place refill relies on an even serpentine");
};

// The unaligned kernel's tile (see launch.h).
using FallbackShape = TileShape<64, 64, 32, 2, 2, 2, 8>;

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_TILE_SHAPE_H_
