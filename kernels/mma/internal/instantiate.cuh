// Included once per operand layout by mma_kernels_{nn,nt,tn,tt}.cu, each of
// which defines MATMUL_MMA_TABLE, MATMUL_MMA_A and MATMUL_MMA_B first.
#include <atomic>
#include <cstdint>

#include "kernels/mma/internal/launch.h"
#include "kernels/mma/internal/mma_kernel.cuh"

namespace matmul::mma::internal {
namespace {

template <class S, Major kA, Major kB, bool kVec>
cudaError_t Launch(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  auto* kernel = &GemmKernel<S, kA, kB, kVec>;
  if constexpr (S::kSharedBytes > 48 * 1024) {
    // The opt-in above 48 KiB is per function and per device; remember which
    // devices have it (bit d) so the hot path skips the driver call.
    static std::atomic<uint64_t> raised{0};
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
    if (bit == 0 || (raised.load(std::memory_order_relaxed) & bit) == 0) {
      err = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSharedBytes);
      if (err != cudaSuccess) return err;
      raised.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  kernel<<<grid, S::kThreads, S::kSharedBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

#define MATMUL_MMA_ENTRY(bm, bn, bk, st, wm, wn, gm, mb)                  \
  &Launch<TileShape<bm, bn, bk, st, wm, wn, gm, mb>, Major::MATMUL_MMA_A, \
          Major::MATMUL_MMA_B, true>,

const LaunchFn MATMUL_MMA_TABLE[kNumConfigs] = {
    MATMUL_MMA_CONFIGS(MATMUL_MMA_ENTRY)};

const LaunchFn MATMUL_MMA_FALLBACK =
    &Launch<FallbackShape, Major::MATMUL_MMA_A, Major::MATMUL_MMA_B, false>;

#undef MATMUL_MMA_ENTRY

}  // namespace matmul::mma::internal
