// The host's way into the sm_90a kernel (compiled for that architecture
// alone, in gemm_nt_launch.cu).
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_LAUNCH_H_
#define MATMUL_KERNELS_HOPPER_INTERNAL_LAUNCH_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include "kernels/hopper/internal/params.h"

namespace matmul::hopper::internal {

// Queues GemmNt<cluster> (cluster 1 or 2) on `stream` with `blocks` blocks
// (a multiple of `cluster`); `b_map`'s boxes are kBlockN / cluster rows.
cudaError_t LaunchGemmNt(int cluster, const CUtensorMap& a_map,
                         const CUtensorMap& b_map, const CUtensorMap& c_map,
                         const GemmNtParams& params, int blocks,
                         cudaStream_t stream);

}  // namespace matmul::hopper::internal

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_LAUNCH_H_
