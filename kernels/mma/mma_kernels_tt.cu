// Kernel instantiations for A "T", B "T" (see internal/instantiate.cuh).
#define MATMUL_MMA_TABLE kLaunchTT
#define MATMUL_MMA_FALLBACK kFallbackTT
#define MATMUL_MMA_TMA_TABLE kTmaTT
#define MATMUL_MMA_A kMN
#define MATMUL_MMA_B kK
#include "kernels/mma/internal/instantiate.cuh"
