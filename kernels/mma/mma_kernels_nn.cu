// Kernel instantiations for A "N", B "N" (see internal/instantiate.cuh).
#define MATMUL_MMA_TABLE kLaunchNN
#define MATMUL_MMA_FALLBACK kFallbackNN
#define MATMUL_MMA_TMA_TABLE kTmaNN
#define MATMUL_MMA_A kK
#define MATMUL_MMA_B kMN
#include "kernels/mma/internal/instantiate.cuh"
