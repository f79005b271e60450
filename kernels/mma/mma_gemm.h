// The project's own BF16 GEMM: mma.sync.m16n8k16 (FP32 accumulation),
// ldmatrix from XOR-swizzled shared memory, a multistage cp.async pipeline
// and GROUP_M tile rasterization. Written for the DGX Spark (GB10, sm_121a,
// 101,376 bytes of shared memory per block, no wgmma) and runnable on any
// sm_80+ part, which is how the H200 tests it.
//
// Device API in the CUTLASS manner: CanImplement -> WorkspaceBytes -> Run.
// A config is a tile shape (TileConfig); every entry of AllConfigs() is a
// compiled kernel. The caller (the selector) picks one per problem.
//
// Supported problems (see GemmProblem for the semantics):
//   - A with strides.col == 1 ("N", [m,k] row-major) or strides.row == 1
//     ("T", stored [k,m]); B likewise ("N": [k,n] row-major, "T": stored
//     [n,k] as in PyTorch's Linear); C with strides.col == 1. Any other
//     stride is rejected by CanImplement (FAILED_PRECONDITION): pack first.
//   - any m, n, k >= 1, batch in [1, 65535]; strided batches with stride 0
//     broadcasting an operand, or device-readable pointer arrays.
//   - C = alpha * A * B + beta * C with C in BF16 or FP32; C is read only
//     when beta != 0.
// Fast path: 16-byte cp.async, taken when the leading dimension of A and B
// is a multiple of 8 elements and the operand's base of each batch entry is
// 16-byte aligned. Otherwise the same kernel loads through predicated 2-byte
// loads (correct, slower). The choice is made per block on the device, so
// misaligned entries of a pointer array are handled too.
// TMA configs (TileConfig::tma) load single products (batch 1, aligned as
// above) through the copy engine on sm_90 and later (the GB10 included)
// and run the cp.async kernel for everything else; see TakesTmaPath.
#ifndef MATMUL_KERNELS_MMA_MMA_GEMM_H_
#define MATMUL_KERNELS_MMA_MMA_GEMM_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::mma {

// One compiled tile shape. block_m x block_n outputs per thread block, K
// consumed block_k at a time through `stages` shared-memory buffers;
// warps_m x warps_n warps each own a (block_m/warps_m) x (block_n/warps_n)
// piece of the tile. group_m: tiles of group_m rows of blocks are walked
// column by column so that neighbouring blocks share A and B in L2.
struct TileConfig {
  int block_m = 0;
  int block_n = 0;
  int block_k = 0;
  int stages = 0;
  int warps_m = 0;
  int warps_n = 0;
  int group_m = 8;
  // Load single products through the copy engine (TMA) where possible:
  // one thread issues each k-tile, and the warps synchronise through
  // per-stage barriers instead of a block-wide barrier per k-tile.
  bool tma = false;

  // e.g. "mma_128x256x32_s4_w2x4", "mma_128x128x64_s3_w2x2_tma".
  std::string Name() const;
  // Dynamic shared memory the kernel needs:
  // (block_m + block_n) * block_k * 2 bytes * stages, plus for TMA configs
  // 1024 bytes of alignment slack and 16 bytes of barriers per stage.
  int SharedBytes() const;
  int Threads() const { return 32 * warps_m * warps_n; }

  friend bool operator==(const TileConfig&, const TileConfig&) = default;
};

// Every instantiated config, largest tiles first, each TMA config right
// after the same tile's cp.async one. Stable order.
const std::vector<TileConfig>& AllConfigs();

// Checks, before any GPU work, whether config `c` can run `p` on a device
// whose opt-in shared memory per block is `max_shared_bytes`.
// INVALID_ARGUMENT: malformed problem (sizes < 1, null pointers, unknown
// config). FAILED_PRECONDITION: a valid problem this kernel does not take
// (unsupported strides, batch > 65535, config needs more shared memory than
// the device has). The message says which and what was expected.
absl::Status CanImplement(const GemmProblem& p, const TileConfig& c,
                          int max_shared_bytes);

// Always 0 today (no split-K); callers should still ask.
size_t WorkspaceBytes(const GemmProblem& p, const TileConfig& c);

// Enqueues the product on `stream` (current device). Pointers in `p` are
// device pointers. Runs CanImplement against the current device's limit
// first, then returns any launch error. Asynchronous: errors during
// execution surface at the next synchronisation.
absl::Status Run(const GemmProblem& p, const TileConfig& c, cudaStream_t stream,
                 void* workspace = nullptr);

// Whether Run(p, c) on `device` uses the copy-engine kernel: c.tma, a
// device of compute capability 9.0 or later whose driver can encode tensor
// maps, batch 1 without pointer arrays, 16-byte aligned A and B bases and
// leading dimensions that are multiples of 8 elements, and a layout the
// config has a TMA kernel for (192x128 and 160x64: NN and NT only).
bool TakesTmaPath(const GemmProblem& p, const TileConfig& c, int device);

// cudaDevAttrMaxSharedMemoryPerBlockOptin of `device` (cached), or 0 when
// the attribute cannot be read.
int MaxSharedBytesOptin(int device);

}  // namespace matmul::mma

#endif  // MATMUL_KERNELS_MMA_MMA_GEMM_H_
