// The Hopper kernels' instances and their launch (sm_90a only): the
// cooperative kernel in two cluster sizes and the ping-pong kernel, each by
// four operand layouts by two output types.
#include "kernels/hopper/internal/gemm_kernel.cuh"
#include "kernels/hopper/internal/launch.h"
#include "kernels/hopper/internal/pingpong_kernel.cuh"

namespace matmul::hopper::internal {
namespace {

using KernelFn = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, GemmParams);

cudaError_t Launch(KernelFn kernel, int cluster, int shared_bytes,
                   const CUtensorMap& a_map, const CUtensorMap& b_map,
                   const CUtensorMap& c_map, const GemmParams& params,
                   int blocks, cudaStream_t stream) {
  // Per device, as the attribute is; set on every launch, it costs little
  // beside the product.
  cudaError_t e = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, a_map, b_map, c_map, params);
}

// The instance for the layouts and output type, of `Kernel` (a template
// of <kAMnMajor, kBMnMajor, kFp32Out>).
template <template <bool, bool, bool> class Kernel>
KernelFn Instance(bool a_mn_major, bool b_mn_major, bool fp32_out) {
  if (fp32_out) {
    if (a_mn_major) {
      return b_mn_major ? Kernel<true, true, true>::fn
                        : Kernel<true, false, true>::fn;
    }
    return b_mn_major ? Kernel<false, true, true>::fn
                      : Kernel<false, false, true>::fn;
  }
  if (a_mn_major) {
    return b_mn_major ? Kernel<true, true, false>::fn
                      : Kernel<true, false, false>::fn;
  }
  return b_mn_major ? Kernel<false, true, false>::fn
                    : Kernel<false, false, false>::fn;
}

template <bool kAMnMajor, bool kBMnMajor, bool kFp32Out>
struct Cooperative1 {
  static constexpr KernelFn fn = Gemm<1, kAMnMajor, kBMnMajor, kFp32Out>;
};
template <bool kAMnMajor, bool kBMnMajor, bool kFp32Out>
struct Cooperative2 {
  static constexpr KernelFn fn = Gemm<2, kAMnMajor, kBMnMajor, kFp32Out>;
};
template <bool kAMnMajor, bool kBMnMajor, bool kFp32Out>
struct PingPong {
  static constexpr KernelFn fn = PingPongGemm<kAMnMajor, kBMnMajor, kFp32Out>;
};

}  // namespace

cudaError_t LaunchGemm(int cluster, bool a_mn_major, bool b_mn_major,
                       bool fp32_out, const CUtensorMap& a_map,
                       const CUtensorMap& b_map, const CUtensorMap& c_map,
                       const GemmParams& params, int blocks,
                       cudaStream_t stream) {
  KernelFn kernel = nullptr;
  switch (cluster) {
    case 1:
      kernel = Instance<Cooperative1>(a_mn_major, b_mn_major, fp32_out);
      break;
    case 2:
      kernel = Instance<Cooperative2>(a_mn_major, b_mn_major, fp32_out);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return Launch(kernel, cluster, kSharedBytes, a_map, b_map, c_map, params,
                blocks, stream);
}

cudaError_t LaunchPingPongGemm(bool a_mn_major, bool b_mn_major, bool fp32_out,
                               const CUtensorMap& a_map,
                               const CUtensorMap& b_map,
                               const CUtensorMap& c_map,
                               const GemmParams& params, int blocks,
                               cudaStream_t stream) {
  return Launch(Instance<PingPong>(a_mn_major, b_mn_major, fp32_out), 1,
                pingpong::kSharedBytes, a_map, b_map, c_map, params, blocks,
                stream);
}

}  // namespace matmul::hopper::internal
