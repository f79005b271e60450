// Host-side glue between mma_gemm.cc and the kernel instantiations, which
// live in one .cu file per operand layout so they compile in parallel.
#ifndef MATMUL_KERNELS_MMA_INTERNAL_LAUNCH_H_
#define MATMUL_KERNELS_MMA_INTERNAL_LAUNCH_H_

#include <cuda_runtime.h>

#include "kernels/mma/internal/configs.h"

namespace matmul::mma::internal {

struct KernelParams;  // internal/params.h

// Launches one instantiation on `grid` (x: tiles, y: batch entries), with
// dynamic shared memory raised to what the config needs on first use per
// device.
using LaunchFn = cudaError_t (*)(const KernelParams& p, dim3 grid,
                                 cudaStream_t stream);

// The tile shape of the unaligned (2-byte load) kernel, one per layout.
// Small, so it fits every device and is cheap to compile.
inline constexpr int kFallbackBlockM = 64;
inline constexpr int kFallbackBlockN = 64;

#define MATMUL_MMA_COUNT(...) +1
inline constexpr int kNumConfigs = 0 MATMUL_MMA_CONFIGS(MATMUL_MMA_COUNT);
#undef MATMUL_MMA_COUNT

// Indexed by config (MATMUL_MMA_CONFIGS order). Names: A layout then B
// layout as in ShapeName ("N": unit column stride, "T": unit row stride);
// null where a config has no kernel for that layout (kHasCpAsyncKernel).
extern const LaunchFn kLaunchNN[kNumConfigs];
extern const LaunchFn kLaunchNT[kNumConfigs];
extern const LaunchFn kLaunchTN[kNumConfigs];
extern const LaunchFn kLaunchTT[kNumConfigs];
// The copy-engine (TMA) kernel of each config, null where it has none.
extern const LaunchFn kTmaNN[kNumConfigs];
extern const LaunchFn kTmaNT[kNumConfigs];
extern const LaunchFn kTmaTN[kNumConfigs];
extern const LaunchFn kTmaTT[kNumConfigs];

extern const LaunchFn kFallbackNN;
extern const LaunchFn kFallbackNT;
extern const LaunchFn kFallbackTN;
extern const LaunchFn kFallbackTT;

}  // namespace matmul::mma::internal

#endif  // MATMUL_KERNELS_MMA_INTERNAL_LAUNCH_H_
