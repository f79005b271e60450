// Kernel instantiations for A "T", B "N" (see internal/instantiate.cuh).
#define MATMUL_MMA_TABLE kLaunchTN
#define MATMUL_MMA_FALLBACK kFallbackTN
#define MATMUL_MMA_TMA_TABLE kTmaTN
#define MATMUL_MMA_A kMN
#define MATMUL_MMA_B kMN
#include "kernels/mma/internal/instantiate.cuh"
