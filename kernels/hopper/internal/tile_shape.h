// The Hopper kernels' fixed shapes (gemm_kernel.cuh, pingpong_kernel.cuh),
// for the host code too: tile, pipeline, threads and the shared memory
// they take.
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_TILE_SHAPE_H_
#define MATMUL_KERNELS_HOPPER_INTERNAL_TILE_SHAPE_H_

namespace matmul::hopper::internal {

inline constexpr int kBlockM = 128;
inline constexpr int kBlockN = 256;
inline constexpr int kBlockK = 64;  // 64 BF16 = 128 bytes: one swizzle row
inline constexpr int kStages = 4;
inline constexpr int kThreads = 384;  // a producer and two consumer warpgroups
inline constexpr int kProducerRegisters = 40;
inline constexpr int kConsumerRegisters = 232;
inline constexpr int kGroupM = 8;  // tile rows walked together
inline constexpr int kTileElements = kBlockM * kBlockN;

inline constexpr int kATileBytes = kBlockM * kBlockK * 2;
inline constexpr int kBTileBytes = kBlockN * kBlockK * 2;
inline constexpr int kStageBytes = kATileBytes + kBTileBytes;

// The epilogue stages each consumer's 64 x 256 part of the tile in chunks
// of 64 rows by one swizzle row (64 BF16 or 32 FP32 columns), kOutBuffers
// at a time.
inline constexpr int kChunkBytes = 64 * 128;
inline constexpr int kOutBuffers = 2;

// Dynamic shared memory: the stages, the epilogue's buffers and slack to
// align them to 1024 bytes (the 128-byte swizzle's period).
inline constexpr int kSharedBytes =
    kStages * kStageBytes + 2 * kOutBuffers * kChunkBytes + 1024;

// A split tile's parts are at least this many k-steps long.
inline constexpr int kMinPartKSteps = 4;

// The ping-pong kernel (pingpong_kernel.cuh): each consumer warpgroup
// takes tiles of its own, so a stage holds one warpgroup's k-step; the same
// threads, register split, epilogue buffers and shared memory as above.
namespace pingpong {
inline constexpr int kBlockM = 128;
inline constexpr int kBlockN = 128;
inline constexpr int kStages = 6;
inline constexpr int kStageBytes = (kBlockM + kBlockN) * kBlockK * 2;
inline constexpr int kSharedBytes =
    kStages * kStageBytes + 2 * kOutBuffers * kChunkBytes + 1024;
static_assert(kSharedBytes <= internal::kSharedBytes);
}  // namespace pingpong

}  // namespace matmul::hopper::internal

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_TILE_SHAPE_H_
