// The Hopper kernel's instances and their launch (sm_90a only).
#include "kernels/hopper/internal/gemm_nt_kernel.cuh"
#include "kernels/hopper/internal/launch.h"

namespace matmul::hopper::internal {
namespace {

template <int kCluster>
cudaError_t Launch(const CUtensorMap& a_map, const CUtensorMap& b_map,
                   const CUtensorMap& c_map, const GemmNtParams& params,
                   int blocks, cudaStream_t stream) {
  // Per device, as the attribute is; set on every launch, it costs little
  // beside the product.
  cudaError_t e = cudaFuncSetAttribute(
      GemmNt<kCluster>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      kSharedBytes);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSharedBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = kCluster;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, GemmNt<kCluster>, a_map, b_map, c_map,
                            params);
}

}  // namespace

cudaError_t LaunchGemmNt(int cluster, const CUtensorMap& a_map,
                         const CUtensorMap& b_map, const CUtensorMap& c_map,
                         const GemmNtParams& params, int blocks,
                         cudaStream_t stream) {
  switch (cluster) {
    case 1:
      return Launch<1>(a_map, b_map, c_map, params, blocks, stream);
    case 2:
      return Launch<2>(a_map, b_map, c_map, params, blocks, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace matmul::hopper::internal
