// Included once per operand layout by mma_kernels_{nn,nt,tn,tt}.cu, each of
// which defines MATMUL_MMA_TABLE, MATMUL_MMA_FALLBACK, MATMUL_MMA_TMA_TABLE,
// MATMUL_MMA_A and MATMUL_MMA_B first.
#include <atomic>
#include <cstdint>

#include "kernels/mma/internal/kernels.cuh"
#include "kernels/mma/internal/launch.h"

namespace matmul::mma::internal {
namespace {

// Launches kKernel with kBytes of dynamic shared memory. The kernel is a
// template argument so that each kernel has its own `raised` set.
template <auto kKernel, int kBytes>
cudaError_t LaunchWith(const KernelParams& p, dim3 grid, int threads,
                       cudaStream_t stream) {
  if constexpr (kBytes > 48 * 1024) {
    // The opt-in above 48 KiB is per function and per device; remember which
    // devices have it (bit d) so the hot path skips the driver call.
    static std::atomic<uint64_t> raised{0};
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const uint64_t bit = device < 64 ? (uint64_t{1} << device) : 0;
    if (bit == 0 || (raised.load(std::memory_order_relaxed) & bit) == 0) {
      err = cudaFuncSetAttribute(
          kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
      if (err != cudaSuccess) return err;
      raised.fetch_or(bit, std::memory_order_relaxed);
    }
  }
  kKernel<<<grid, threads, kBytes, stream>>>(p);
  return cudaGetLastError();
}

template <class S, Major kA, Major kB, bool kVec>
cudaError_t Launch(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchWith<&GemmKernel<S, kA, kB, kVec>, S::kSharedBytes>(
      p, grid, S::kThreads, stream);
}

template <class S, Major kA, Major kB>
cudaError_t LaunchTma(const KernelParams& p, dim3 grid, cudaStream_t stream) {
  return LaunchWith<&GemmKernelTma<S, kA, kB>, kTmaSharedBytes<S>>(
      p, grid, S::kThreads, stream);
}

// The cp.async entry of config S, or null where it has none.
template <class S, Major kA, Major kB>
constexpr LaunchFn CpAsyncEntry() {
  if constexpr (kHasCpAsyncKernel<S, kA, kB>) {
    return &Launch<S, kA, kB, true>;
  } else {
    return nullptr;
  }
}

// The TMA entry of config S, or null where it has none.
template <class S, Major kA, Major kB>
constexpr LaunchFn TmaEntry() {
  if constexpr (kHasTmaKernel<S, kA, kB>) {
    return &LaunchTma<S, kA, kB>;
  } else {
    return nullptr;
  }
}

}  // namespace

#define MATMUL_MMA_ENTRY(bm, bn, bk, st, wm, wn, gm, mb, tmb)                  \
  CpAsyncEntry<TileShape<bm, bn, bk, st, wm, wn, gm, mb>, Major::MATMUL_MMA_A, \
               Major::MATMUL_MMA_B>(),

const LaunchFn MATMUL_MMA_TABLE[kNumConfigs] = {
    MATMUL_MMA_CONFIGS(MATMUL_MMA_ENTRY)};

#define MATMUL_MMA_TMA_ENTRY(bm, bn, bk, st, wm, wn, gm, mb, tmb)           \
  TmaEntry<TileShape<bm, bn, bk, st, wm, wn, gm, tmb>, Major::MATMUL_MMA_A, \
           Major::MATMUL_MMA_B>(),

const LaunchFn MATMUL_MMA_TMA_TABLE[kNumConfigs] = {
    MATMUL_MMA_CONFIGS(MATMUL_MMA_TMA_ENTRY)};
#undef MATMUL_MMA_TMA_ENTRY

const LaunchFn MATMUL_MMA_FALLBACK =
    &Launch<FallbackShape, Major::MATMUL_MMA_A, Major::MATMUL_MMA_B, false>;

#undef MATMUL_MMA_ENTRY

}  // namespace matmul::mma::internal
