// The host's way into the sm_90a kernels (compiled for that architecture
// alone, in gemm_launch.cu).
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_LAUNCH_H_
#define MATMUL_KERNELS_HOPPER_INTERNAL_LAUNCH_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include "kernels/hopper/internal/params.h"

namespace matmul::hopper::internal {

// Queues Gemm<cluster, a_mn_major, b_mn_major, fp32_out> (cluster 1 or 2)
// on `stream` with `blocks` blocks (a multiple of `cluster`). The maps'
// boxes, each one 128-byte row wide: A K-major kBlockM rows, MN-major 64
// K-rows; B K-major kBlockN / cluster rows, MN-major 64 K-rows; C 64 rows.
cudaError_t LaunchGemm(int cluster, bool a_mn_major, bool b_mn_major,
                       bool fp32_out, const CUtensorMap& a_map,
                       const CUtensorMap& b_map, const CUtensorMap& c_map,
                       const GemmParams& params, int blocks,
                       cudaStream_t stream);

// Queues PingPongGemm<a_mn_major, b_mn_major, fp32_out> on `stream` with
// `blocks` blocks. The maps' boxes as above with pingpong::kBlockM and
// pingpong::kBlockN rows (no clusters).
cudaError_t LaunchPingPongGemm(bool a_mn_major, bool b_mn_major, bool fp32_out,
                               const CUtensorMap& a_map,
                               const CUtensorMap& b_map,
                               const CUtensorMap& c_map,
                               const GemmParams& params, int blocks,
                               cudaStream_t stream);

}  // namespace matmul::hopper::internal

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_LAUNCH_H_
