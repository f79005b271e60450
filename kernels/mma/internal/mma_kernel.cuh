// The mma.sync GEMM kernel: threadblock tile, warp tile, pipeline and
// epilogue. Private to kernels/mma; the device API is mma_gemm.h.
//
// Layout of one pipeline stage in shared memory. Each operand tile is kept
// in the orientation it has in global memory, so every global load is a
// 16-byte cp.async of 8 contiguous elements:
//   K-major operand (A "N", B "T"):  [mn rows][block_k]   -> ldmatrix
//   MN-major operand (A "T", B "N"): [block_k rows][mn]   -> ldmatrix.trans
// Rows are split into 16-byte chunks and each 128-byte line's chunks are
// XOR-permuted by the row index, so that the 8 row addresses of one ldmatrix
// phase and the 8 chunks of one cp.async phase fall in 8 different 16-byte
// bank groups: no bank conflicts on either side.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_MMA_KERNEL_CUH_
#define MATMUL_KERNELS_MMA_INTERNAL_MMA_KERNEL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/params.h"

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
  // Gemm::InPlaceLoop).
  static constexpr bool kInPlaceFrags =
      kMI * kNJ * 4 + 2 * (kMI * 4 + kNJ * 2) + 48 > kRegBudget;
  static_assert(!kInPlaceFrags || (kMI % 2 == 0 && kKSteps % 2 == 0),
                "in-place refill relies on an even serpentine");
};

// The unaligned kernel's tile (see launch.h).
using FallbackShape = TileShape<64, 64, 32, 2, 2, 2, 8>;

// ---------------------------------------------------------------- PTX ----

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; bytes beyond src_bytes (0..16) are zeroed,
// which is how tails along every dimension become zeros for the MMA.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src,
                                          int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void CpAsync16Full(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
               "l"(src));
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
__device__ __forceinline__ void StoreShared16(uint32_t dst, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

__device__ __forceinline__ void StoreShared2(uint32_t dst, unsigned short v) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(dst), "h"(v));
}

template <bool kTrans>
__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], uint32_t addr) {
  if constexpr (kTrans) {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(addr));
  } else {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(addr));
  }
}

// The same, returning registers 0-1 and 2-3 as two pairs.
template <bool kTrans>
__device__ __forceinline__ void Ldmatrix4x2(uint32_t (&lo)[2],
                                            uint32_t (&hi)[2], uint32_t addr) {
  if constexpr (kTrans) {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(lo[0]), "=r"(lo[1]), "=r"(hi[0]), "=r"(hi[1])
        : "r"(addr));
  } else {
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(lo[0]), "=r"(lo[1]), "=r"(hi[0]), "=r"(hi[1])
        : "r"(addr));
  }
}

__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Copy engine (TMA) and mbarriers, sm_90 and later (the GB10 has both).
// Callers compile them only for __CUDA_ARCH__ >= 900.
__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(count)
               : "memory");
}
// Makes the initialised barriers visible to the copy engine.
__device__ __forceinline__ void FenceMbarInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` of copies completing on `bar`.
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar,
                                                   uint32_t bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
}
// Spins until the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// One box of a 2-D tensor map at element coordinates (c0 innermost, c1)
// into shared memory at dst; completes on `bar`. Out-of-range elements
// arrive as zeros.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const void* map, int c0,
                                          int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::"
      "complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// ------------------------------------------------------ shared layout ----

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

// ------------------------------------------------------- global loads ----

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
  // k-tile, which their register budget affords and which leaves their
  // code as it was measured.
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
  // immediate offset. This halves the main loop's non-MMA instructions.
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

// ---------------------------------------------------------- the kernel ----

// kPanels: shared memory in the TMA kernel's panel layout (SmemTile).
template <class S, Major kA, Major kB, bool kPanels = false>
struct Gemm {
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
    LoadFrags(frags[0], smem, smem_b, oa, ob, 0);

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
        LoadFrags(frags[(kk + 1) % 2], smem + read * S::kStageBytesA,
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
        Mmas(acc, frags[kk % 2]);
      }
    }
    CpAsyncWait<0>();
  }

  // ------------------------------------------------ TMA pipeline ----
  // The TMA kernel's main loops (kPanels layout): one thread issues each
  // k-tile as copy-engine boxes that complete on the stage's `full`
  // barrier; each warp waits for that barrier alone and, once its MMAs
  // have consumed the stage's last fragments, arrives on the stage's
  // `empty` barrier, which the issuing thread waits for before it reuses
  // the stage. No block-wide barrier, no per-thread copies or predicates:
  // the copy engine zero-fills tails.
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

  // The TMA kernel's main loop: two fragment sets (as PairLoop) or, where
  // the registers do not allow them, fragments refilled in place (as
  // InPlaceLoop, whose comment explains the order).
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
      FirstInPlaceFrags(f, smem, smem_b, oa, ob);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int done = read;
        InPlaceTile(
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
      LoadFrags(frags[0], smem, smem_b, oa, ob, 0);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int done = read;
#pragma unroll
        for (int kk = 0; kk < S::kKSteps; ++kk) {
          if (kk == S::kKSteps - 1) {
            read = (read + 1 == S::kStages) ? 0 : read + 1;
            TmaAwait(st, read, kt, k_tiles);
          }
          const int next = (kk + 1) % S::kKSteps;
          LoadFrags(frags[(kk + 1) % 2], smem + read * S::kStageBytesA,
                    smem_b + read * S::kStageBytesB, oa, ob, next);
          if (kk == kIssueStep && threadIdx.x == 0) {
            TmaRefill(p, st, m0, n0, kt, k_tiles);
          }
          Mmas(acc, frags[kk % 2]);
        }
        TmaRelease(st, done);
      }
    }
  }

  // Main loop of the large warp tiles (96x64: 192 accumulators), which
  // cannot afford two full sets of fragments. A is double-buffered by row:
  // the ldmatrix of row i + 1 is issued before row i's MMAs (NJ MMAs of
  // cover), so two A fragments are live instead of kMI. B is refilled in
  // place: each pair right after its MMA in the step's last row. Rows run
  // in serpentine order with the direction set by (i + kk) parity (kMI and
  // kKSteps are even), so the next step's first row starts with the B pair
  // that was refilled first. The k-tile's barrier sits before the last row
  // of the last step, when kMI - 1 rows of MMAs are queued behind it.
  // kFull: every k-tile of this block is wholly in range (LoadFull only).
  template <bool kFull, class LoaderA, class LoaderB>
  __device__ __forceinline__ static void InPlaceLoop(
      float (&acc)[S::kMI][S::kNJ][4], const KernelParams& p, uint32_t smem,
      uint32_t smem_b, const OffsetsA& oa, const OffsetsB& ob, LoaderA& load_a,
      LoaderB& load_b) {
    const int k_tiles = (p.k + S::kBK - 1) / S::kBK;
    InPlaceFrags f;
    int read = 0;
    FirstInPlaceFrags(f, smem, smem_b, oa, ob);
    for (int kt = 0; kt < k_tiles; ++kt) {
      InPlaceTile(
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

  // The fragments of the in-place order: A double-buffered by row, B
  // refilled pair by pair.
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

  // alpha * acc + beta * C -> C, straight from the accumulator fragments:
  // each thread owns pairs of adjacent columns, stored as one 4- or 8-byte
  // access when C's alignment allows.
  template <typename T>
  __device__ __forceinline__ static void Epilogue(
      const float (&acc)[S::kMI][S::kNJ][4], const KernelParams& p, T* c,
      int m0, int n0) {
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int row0 = m0 + (warp / S::kWN) * S::kWTM + (lane >> 2);
    const int col0 = n0 + (warp % S::kWN) * S::kWTN + (lane & 3) * 2;
    const bool pairs = (p.ldc % 2 == 0) &&
                       (reinterpret_cast<uintptr_t>(c) % (2 * sizeof(T)) == 0);
    const bool read_c = p.beta != 0.0f;
#pragma unroll
    for (int i = 0; i < S::kMI; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + i * 16 + h * 8;
        if (row >= p.m) continue;
        T* crow = c + static_cast<int64_t>(row) * p.ldc;
#pragma unroll
        for (int j = 0; j < S::kNJ; ++j) {
          const int col = col0 + j * 8;
          float v0 = p.alpha * acc[i][j][2 * h];
          float v1 = p.alpha * acc[i][j][2 * h + 1];
          if (pairs && col + 1 < p.n) {
            if constexpr (sizeof(T) == 4) {
              float2* dst = reinterpret_cast<float2*>(crow + col);
              if (read_c) {
                const float2 old = *dst;
                v0 += p.beta * old.x;
                v1 += p.beta * old.y;
              }
              *dst = make_float2(v0, v1);
            } else {
              __nv_bfloat162* dst =
                  reinterpret_cast<__nv_bfloat162*>(crow + col);
              if (read_c) {
                const float2 old = __bfloat1622float2(*dst);
                v0 += p.beta * old.x;
                v1 += p.beta * old.y;
              }
              *dst = __floats2bfloat162_rn(v0, v1);
            }
          } else {
            if (col < p.n) Store1(crow + col, v0, p.beta, read_c);
            if (col + 1 < p.n) Store1(crow + col + 1, v1, p.beta, read_c);
          }
        }
      }
    }
  }

  __device__ __forceinline__ static void Store1(float* dst, float v, float beta,
                                                bool read_c) {
    *dst = read_c ? v + beta * *dst : v;
  }
  __device__ __forceinline__ static void Store1(__nv_bfloat16* dst, float v,
                                                float beta, bool read_c) {
    *dst = __float2bfloat16_rn(read_c ? v + beta * __bfloat162float(*dst) : v);
  }
};

// Tile coordinates of block-tile `pid` under GROUP_M rasterization (as the
// seed): blocks walk groups of kGroupM tile rows column by column, so that
// neighbours share A rows and B columns in L2.
template <class S>
__device__ __forceinline__ void TileOrigin(const KernelParams& p, int pid,
                                           int& m0, int& n0) {
  const int in_group = S::kGroupM * p.tiles_n;
  const int group = pid / in_group;
  const int first_m = group * S::kGroupM;
  const int group_rows = min(p.tiles_m - first_m, S::kGroupM);
  m0 = (first_m + (pid % in_group) % group_rows) * S::kBM;
  n0 = ((pid % in_group) / group_rows) * S::kBN;
}

__device__ __forceinline__ const uint16_t* EntryA(const KernelParams& p,
                                                  int batch) {
  return p.a_ptrs ? static_cast<const uint16_t*>(p.a_ptrs[batch])
                  : p.a + batch * p.a_batch;
}
__device__ __forceinline__ const uint16_t* EntryB(const KernelParams& p,
                                                  int batch) {
  return p.b_ptrs ? static_cast<const uint16_t*>(p.b_ptrs[batch])
                  : p.b + batch * p.b_batch;
}
__device__ __forceinline__ void* EntryC(const KernelParams& p, int batch) {
  return p.c_ptrs
             ? p.c_ptrs[batch]
             : static_cast<char*>(p.c) + batch * p.c_batch * (p.c_fp32 ? 4 : 2);
}

// kTma: the copy-engine main loop (GemmKernelTma), else cp.async (kVec) or
// 2-byte loads.
template <class S, Major kA, Major kB, bool kVec, bool kTma = false>
__device__ __forceinline__ void GemmTile(const KernelParams& p, int pid,
                                         uint32_t smem) {
  using G = Gemm<S, kA, kB, kTma>;
  float acc[S::kMI][S::kNJ][4];
#pragma unroll
  for (int i = 0; i < S::kMI; ++i)
#pragma unroll
    for (int j = 0; j < S::kNJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  {
    int m0, n0;
    TileOrigin<S>(p, pid, m0, n0);
    if constexpr (kTma) {
      G::TmaLoop(acc, p, m0, n0, smem);
    } else {
      G::template MainLoop<kVec>(acc, p, EntryA(p, blockIdx.y),
                                 EntryB(p, blockIdx.y), m0, n0, smem);
    }
  }
  // Recomputed rather than kept live through the main loop: registers are
  // what limits these tiles.
  int m0, n0;
  TileOrigin<S>(p, pid, m0, n0);
  void* c = EntryC(p, blockIdx.y);
  if (p.c_fp32) {
    G::Epilogue(acc, p, static_cast<float*>(c), m0, n0);
  } else {
    G::Epilogue(acc, p, static_cast<__nv_bfloat16*>(c), m0, n0);
  }
}

// kVec: the fast kernel (16-byte cp.async), one block per tile. Blocks
// whose batch entry has a misaligned A or B base (possible only with
// pointer arrays) return at once without writing; the !kVec kernel,
// launched after it, covers exactly those entries (all entries when the
// leading dimensions are misaligned). Keeping the two loaders in separate
// kernels keeps the fast one's registers free. The !kVec kernel loops over
// tiles with a grid stride so that the fix-up launch can be a handful of
// blocks per batch entry.
template <class S, Major kA, Major kB, bool kVec>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks)
    GemmKernel(const __grid_constant__ KernelParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const bool aligned =
      p.ld_aligned && ((reinterpret_cast<uintptr_t>(EntryA(p, blockIdx.y)) |
                        reinterpret_cast<uintptr_t>(EntryB(p, blockIdx.y))) &
                       15) == 0;
  if (aligned != kVec) return;
  const uint32_t smem_base = SmemAddress(smem);
  if constexpr (kVec) {
    GemmTile<S, kA, kB, kVec>(p, blockIdx.x, smem_base);
  } else {
    const int tiles = p.tiles_m * p.tiles_n;
    for (int pid = blockIdx.x; pid < tiles; pid += gridDim.x) {
      GemmTile<S, kA, kB, kVec>(p, pid, smem_base);
      __syncthreads();  // the next tile reuses shared memory
    }
  }
}

// Whether config S has a cp.async kernel for these layouts: an MN-major
// operand's shared rows run along its block edge, which must make 64-byte
// or whole 128-byte rows (SmemTile).
template <class S, Major kA, Major kB>
constexpr bool kHasCpAsyncKernel = (kA == Major::kK ||
                                    IsSharedRowSize(S::kBM * 2)) &&
                                   (kB == Major::kK ||
                                    IsSharedRowSize(S::kBN * 2));

// Whether config S has a TMA kernel: rows of whole 128-byte panels
// (block_k 64 or 128; block_m and block_n multiples of 64 for MN-major
// operands), and warp tiles wider than 64 only along a K-major operand
// (an MN-major one's 96-wide fragment offsets would cross panels).
template <class S, Major kA, Major kB>
constexpr bool kHasTmaKernel =
    (S::kWTM <= 64 || kA == Major::kK) &&
    (S::kWTN <= 64 || kB == Major::kK) && S::kBK % 64 == 0 &&
    (kA == Major::kK || S::kBM % 64 == 0) &&
    (kB == Major::kK || S::kBN % 64 == 0);

// Dynamic shared memory of the TMA kernel.
template <class S>
constexpr int kTmaSharedBytes = S::kSharedBytes +
                                TmaExtraSharedBytes(S::kStages);

// The copy-engine kernel (the host launches it on sm_90 and later only):
// one block per tile of a single product whose A and B have tensor maps in
// p (batch 1, 16-byte aligned bases and leading dimensions).
template <class S, Major kA, Major kB>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks)
    GemmKernelTma(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t base = (SmemAddress(smem) + 1023) & ~1023u;
  GemmTile<S, kA, kB, true, true>(p, blockIdx.x, base);
#else
  // Compiled for a part without the copy engine and run on one with it
  // (PTX of an older target): the same tile through the cp.async loop.
  extern __shared__ __align__(128) uint8_t smem[];
  GemmTile<S, kA, kB, true>(p, blockIdx.x, SmemAddress(smem));
#endif
}

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_MMA_KERNEL_CUH_
