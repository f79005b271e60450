// The project's own GEMM kernels (kernels/mma, namespace matmul::mma) seen
// through one small interface, so the selector and the tools need not care
// whether that library is built. Without it (MATMUL_HAVE_MMA undefined) the
// list is empty and only cuBLASLt is offered.
#ifndef MATMUL_KERNELS_CUDA_OWN_KERNELS_H_
#define MATMUL_KERNELS_CUDA_OWN_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::cuda {

struct OwnKernel {
  int index = 0;     // into matmul::mma::AllConfigs()
  std::string name;  // "mma_" + TileConfig::Name(), e.g. mma_128x256x32_s4_w2x4
  std::string family;    // the tile shape, e.g. "mma_128x256"
  int shared_bytes = 0;  // TileConfig::SharedBytes()
  int block_m = 0;
  int block_n = 0;
};

// Every own configuration, in the library's order (empty without it).
const std::vector<OwnKernel>& OwnKernels();

// Whether the mma library was built in.
bool HaveOwnKernels();

absl::Status OwnCanImplement(const GemmProblem& problem, int index,
                             int max_shared_bytes);
size_t OwnWorkspaceBytes(const GemmProblem& problem, int index);
absl::Status OwnRun(const GemmProblem& problem, int index, cudaStream_t stream,
                    void* workspace);

// The device's opt-in shared memory per block (101,376 B on a GB10,
// 232,448 B on an H200), read at run time.
absl::StatusOr<int> MaxSharedBytesOptin(int device);

// The GB10's per-block limit: configs at or under it make the "Spark path".
inline constexpr int kSparkSharedBytes = 101376;

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_OWN_KERNELS_H_
