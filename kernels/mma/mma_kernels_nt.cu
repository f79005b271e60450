// Kernel instantiations for A "N", B "T" (see internal/instantiate.cuh).
#define MATMUL_MMA_TABLE kLaunchNT
#define MATMUL_MMA_FALLBACK kFallbackNT
#define MATMUL_MMA_TMA_TABLE kTmaNT
#define MATMUL_MMA_A kK
#define MATMUL_MMA_B kK
#include "kernels/mma/internal/instantiate.cuh"
