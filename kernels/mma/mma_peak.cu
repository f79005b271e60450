// The mma.sync ceiling of the device, for the timing tool: every warp
// issues independent m16n8k16 BF16 MMAs from registers, no memory traffic.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/mma/internal/mma_kernel.cuh"

namespace matmul::mma {
namespace {

constexpr int kChains = 16;  // independent accumulators per warp

__global__ void __launch_bounds__(256) PeakKernel(int iters, float* out) {
  uint32_t a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = 0x3f803f80u ^ (threadIdx.x * 7 + i);
  for (int i = 0; i < 2; ++i) b[i] = 0x3f803f80u ^ (threadIdx.x * 5 + i);
  float acc[kChains][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) internal::MmaBf16(acc[c], a, b);
  }
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c)
    sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (sum == 12345.0f) out[threadIdx.x] = sum;  // keeps the MMAs alive
}

}  // namespace

// Returns the mma.sync BF16 rate in TFLOP/s (blocks_per_sm blocks of 8 warps
// on every SM), or a negative value on a CUDA error.
double MeasureMmaPeakTflops(int blocks_per_sm) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
      cudaSuccess) {
    return -1;
  }
  float* out = nullptr;
  if (cudaMalloc(&out, 1024) != cudaSuccess) return -1;
  const int iters = 4096;
  const int blocks = sms * blocks_per_sm;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  PeakKernel<<<blocks, 256>>>(iters, out);  // warm-up, clocks up
  PeakKernel<<<blocks, 256>>>(iters, out);
  cudaEventRecord(start);
  PeakKernel<<<blocks, 256>>>(iters, out);
  cudaEventRecord(stop);
  const bool ok = cudaEventSynchronize(stop) == cudaSuccess;
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(out);
  if (!ok || cudaGetLastError() != cudaSuccess) return -1;
  const double flop = 2.0 * 16 * 8 * 16 * double(kChains) * iters * 8 * blocks;
  return flop / (ms * 1e-3) / 1e12;
}

}  // namespace matmul::mma
