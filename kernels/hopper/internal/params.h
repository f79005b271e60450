// What the Hopper kernel takes besides its tensor maps.
#ifndef MATMUL_KERNELS_HOPPER_INTERNAL_PARAMS_H_
#define MATMUL_KERNELS_HOPPER_INTERNAL_PARAMS_H_

namespace matmul::hopper::internal {

struct GemmParams {
  int m = 0, n = 0, k = 0;
  // The batch's matrices, and which of A's and B's a product reads: that
  // of its own (step 1) or the first, broadcast (step 0).
  int batch = 1;
  int a_batch_step = 1, b_batch_step = 1;
  float alpha = 1.0f;
  float beta = 0.0f;  // C is read only where this is not 0
  // The split last round's workspace (schedule.h): a kTileElements FP32
  // slot per part and block, and an arrival count per split tile and block,
  // zero before the launch (the kernel leaves them zero). Null: no split.
  float* partials = nullptr;
  int* arrivals = nullptr;
};

}  // namespace matmul::hopper::internal

#endif  // MATMUL_KERNELS_HOPPER_INTERNAL_PARAMS_H_
