// The Hopper kernel's instances and their launch (sm_90a only): two cluster
// sizes by four operand layouts by two output types.
#include "kernels/hopper/internal/gemm_kernel.cuh"
#include "kernels/hopper/internal/launch.h"

namespace matmul::hopper::internal {
namespace {

template <int kCluster, bool kAMnMajor, bool kBMnMajor, bool kFp32Out>
cudaError_t Launch(const CUtensorMap& a_map, const CUtensorMap& b_map,
                   const CUtensorMap& c_map, const GemmParams& params,
                   int blocks, cudaStream_t stream) {
  auto* kernel = Gemm<kCluster, kAMnMajor, kBMnMajor, kFp32Out>;
  // Per device, as the attribute is; set on every launch, it costs little
  // beside the product.
  cudaError_t e = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
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
  return cudaLaunchKernelEx(&config, kernel, a_map, b_map, c_map, params);
}

template <int kCluster, bool kFp32Out>
cudaError_t LaunchLayout(bool a_mn_major, bool b_mn_major,
                         const CUtensorMap& a_map, const CUtensorMap& b_map,
                         const CUtensorMap& c_map, const GemmParams& params,
                         int blocks, cudaStream_t stream) {
  if (a_mn_major) {
    return b_mn_major ? Launch<kCluster, true, true, kFp32Out>(
                            a_map, b_map, c_map, params, blocks, stream)
                      : Launch<kCluster, true, false, kFp32Out>(
                            a_map, b_map, c_map, params, blocks, stream);
  }
  return b_mn_major ? Launch<kCluster, false, true, kFp32Out>(
                          a_map, b_map, c_map, params, blocks, stream)
                    : Launch<kCluster, false, false, kFp32Out>(
                          a_map, b_map, c_map, params, blocks, stream);
}

template <int kCluster>
cudaError_t LaunchOutput(bool a_mn_major, bool b_mn_major, bool fp32_out,
                         const CUtensorMap& a_map, const CUtensorMap& b_map,
                         const CUtensorMap& c_map, const GemmParams& params,
                         int blocks, cudaStream_t stream) {
  return fp32_out ? LaunchLayout<kCluster, true>(a_mn_major, b_mn_major, a_map,
                                                 b_map, c_map, params, blocks,
                                                 stream)
                  : LaunchLayout<kCluster, false>(a_mn_major, b_mn_major, a_map,
                                                  b_map, c_map, params, blocks,
                                                  stream);
}

}  // namespace

cudaError_t LaunchGemm(int cluster, bool a_mn_major, bool b_mn_major,
                       bool fp32_out, const CUtensorMap& a_map,
                       const CUtensorMap& b_map, const CUtensorMap& c_map,
                       const GemmParams& params, int blocks,
                       cudaStream_t stream) {
  switch (cluster) {
    case 1:
      return LaunchOutput<1>(a_mn_major, b_mn_major, fp32_out, a_map, b_map,
                             c_map, params, blocks, stream);
    case 2:
      return LaunchOutput<2>(a_mn_major, b_mn_major, fp32_out, a_map, b_map,
                             c_map, params, blocks, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace matmul::hopper::internal
