// The device's mma.sync ceiling (mma_peak.cu), for the timing tool.
#ifndef MATMUL_KERNELS_MMA_MMA_PEAK_H_
#define MATMUL_KERNELS_MMA_MMA_PEAK_H_

namespace matmul::mma {

struct MmaPeak {
  double tflops = 0;
  double flop_per_sm_cycle = 0;  // the rate per SM, independent of clock
  double clock_mhz = 0;          // the SM clock it ran at
};

MmaPeak MeasureMmaPeak(int blocks_per_sm);

}  // namespace matmul::mma

#endif  // MATMUL_KERNELS_MMA_MMA_PEAK_H_
