// The mma.sync ceiling of the device, for the timing tool: every warp
// issues independent m16n8k16 BF16 MMAs from registers, no memory traffic.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/mma/internal/ptx.cuh"
#include "kernels/mma/mma_peak.h"

namespace matmul::mma {
namespace {

constexpr int kChains = 16;  // independent accumulators per warp

// Thread 0 of each block stores the cycles its block took (clock64), which
// with the elapsed time gives the SM clock the MMAs ran at.
__global__ void __launch_bounds__(256)
    PeakKernel(int iters, float* out, long long* cycles) {
  const long long begin = clock64();
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
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - begin;
}

}  // namespace

// The mma.sync BF16 rate with blocks_per_sm blocks of 8 warps on every SM
// (one wave): TFLOP/s and, with one block per SM, FLOP per SM clock cycle
// and the SM clock (block cycles over elapsed time; with more blocks per SM
// they do not start together, so their cycles do not span the kernel).
// All zero on a CUDA error.
MmaPeak MeasureMmaPeak(int blocks_per_sm) {
  MmaPeak peak;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return peak;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
      cudaSuccess) {
    return peak;
  }
  const int iters = 4096;
  const int blocks = sms * blocks_per_sm;
  // Owned device memory and events, released on every return.
  auto free_device = [](void* p) { cudaFree(p); };
  auto destroy_event = [](cudaEvent_t e) { cudaEventDestroy(e); };
  float* out_raw = nullptr;
  long long* cycles_raw = nullptr;
  if (cudaMalloc(&out_raw, 1024) != cudaSuccess) return peak;
  std::unique_ptr<float, decltype(free_device)> out(out_raw, free_device);
  if (cudaMalloc(&cycles_raw, blocks * sizeof(long long)) != cudaSuccess) {
    return peak;
  }
  std::unique_ptr<long long, decltype(free_device)> cycles(cycles_raw,
                                                           free_device);
  cudaEvent_t start_raw = nullptr, stop_raw = nullptr;
  if (cudaEventCreate(&start_raw) != cudaSuccess) return peak;
  std::unique_ptr<CUevent_st, decltype(destroy_event)> start(start_raw,
                                                             destroy_event);
  if (cudaEventCreate(&stop_raw) != cudaSuccess) return peak;
  std::unique_ptr<CUevent_st, decltype(destroy_event)> stop(stop_raw,
                                                            destroy_event);
  PeakKernel<<<blocks, 256>>>(iters, out.get(), cycles.get());  // warm-up
  PeakKernel<<<blocks, 256>>>(iters, out.get(), cycles.get());
  cudaEventRecord(start.get());
  PeakKernel<<<blocks, 256>>>(iters, out.get(), cycles.get());
  cudaEventRecord(stop.get());
  if (cudaEventSynchronize(stop.get()) != cudaSuccess) return peak;
  float ms = 0;
  cudaEventElapsedTime(&ms, start.get(), stop.get());
  std::vector<long long> host(blocks);
  if (cudaMemcpy(host.data(), cycles.get(), blocks * sizeof(long long),
                 cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaGetLastError() != cudaSuccess || ms <= 0) {
    return peak;
  }
  const double block_flop = 2.0 * 16 * 8 * 16 * double(kChains) * iters * 8;
  double mean_cycles = 0;
  for (long long c : host) mean_cycles += static_cast<double>(c) / blocks;
  peak.tflops = block_flop * blocks / (ms * 1e-3) / 1e12;
  if (blocks_per_sm == 1) {
    peak.flop_per_sm_cycle = block_flop / mean_cycles;
    peak.clock_mhz = mean_cycles / (ms * 1e3);
  }
  return peak;
}

}  // namespace matmul::mma
