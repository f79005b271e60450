// The project's Hopper GEMM (sm_90a, the H200 the tests run on): wgmma
// with both operands in shared memory (K- or MN-major), TMA loads into an
// mbarrier-guarded ring of stages, a producer and two consumer warpgroups, a
// persistent grid in grouped tile order whose last round is split along K, TMA
// stores that overlap the next tile, and optionally 2-block clusters sharing B
// by TMA multicast (internal/gemm_kernel.cuh); or the ping-pong form, whose
// consumers take tiles of their own and turns at the tensor cores
// (internal/pingpong_kernel.cuh).
//
// Device API in the CUTLASS manner: CanImplement -> WorkspaceBytes -> Run;
// a config (Config) is a compiled kernel, the caller (the selector) picks
// one per problem.
//
// Supported problems (see GemmProblem for the semantics); CanImplement
// rejects the rest with FAILED_PRECONDITION, and the selector then takes
// another family:
//   - A "N" ([m,k] row-major) or "T" (stored [k,m]); B "N" ([k,n]
//     row-major) or "T" (stored [n,k], as PyTorch's Linear weight); C in
//     BF16 or FP32, row-major;
//   - rows a multiple of 16 bytes apart and 16-byte aligned bases (the
//     copy engine's rule); any m, n, k >= 1 below 2^31;
//   - single products and strided batches (batch strides whole 16-byte
//     pieces; A's or B's may be 0, one matrix for the whole batch), no
//     pointer arrays; any alpha and beta;
//   - a device of compute capability 9.0 whose driver encodes tensor maps.
#ifndef MATMUL_KERNELS_HOPPER_HOPPER_GEMM_H_
#define MATMUL_KERNELS_HOPPER_HOPPER_GEMM_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::hopper {

struct Config {
  // Blocks per cluster: 1, or 2 sharing B by TMA multicast (the cooperative
  // kernel only).
  int cluster = 1;
  // The ping-pong kernel (internal/pingpong_kernel.cuh): a tile a consumer
  // warpgroup, the two taking turns; otherwise the cooperative one
  // (internal/gemm_kernel.cuh), both consumers on one tile.
  bool pingpong = false;

  // "wgmma_128x256x64_s4", "wgmma_128x256x64_s4_c2",
  // "wgmma_128x128x64_s6_pp".
  std::string Name() const;
  // A tile's rows and columns.
  int BlockM() const;
  int BlockN() const;
  // Dynamic shared memory per block.
  int SharedBytes() const;
};

// Every compiled config, in a stable order.
const std::vector<Config>& AllConfigs();

// Checks, before any GPU work, whether `c` can run `p` on `device`.
// INVALID_ARGUMENT: malformed problem (sizes < 1, null pointers).
// FAILED_PRECONDITION: a valid problem this kernel does not take (see
// above); the message says what was expected.
absl::Status CanImplement(const GemmProblem& p, const Config& c, int device);

// Bytes of workspace Run needs for `p` on `device`: the split last
// round's partial sums, or 0 when that round is not split.
size_t WorkspaceBytes(const GemmProblem& p, const Config& c, int device);

// The most WorkspaceBytes asks for any problem on a device of
// `multiprocessors` SMs: a tile's FP32 sums and an arrival count for each
// block of a full grid.
size_t MaxWorkspaceBytes(int multiprocessors);

// Enqueues the product on `stream` (current device, `device`). With less
// workspace than WorkspaceBytes the last round runs unsplit. Asynchronous:
// errors during execution surface at the next synchronisation.
absl::Status Run(const GemmProblem& p, const Config& c, int device,
                 cudaStream_t stream, void* workspace, size_t workspace_bytes);

}  // namespace matmul::hopper

#endif  // MATMUL_KERNELS_HOPPER_HOPPER_GEMM_H_
