// The device's mma.sync ceiling (mma_peak.cu), for the timing tool.
#ifndef MATMUL_KERNELS_MMA_MMA_PEAK_H_
#define MATMUL_KERNELS_MMA_MMA_PEAK_H_

namespace matmul::mma {

struct MmaPeak {
  double tflops = 0;
  // With one block per SM only (0 otherwise): the rate per SM cycle,
  // independent of the clock, and the SM clock it ran at.
  double flop_per_sm_cycle = 0;
  double clock_mhz = 0;
};

MmaPeak MeasureMmaPeak(int blocks_per_sm);

}  // namespace matmul::mma

#endif  // MATMUL_KERNELS_MMA_MMA_PEAK_H_
