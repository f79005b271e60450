// The families of optional libraries this build links. Exactly one source
// defines OptionalFamilies(): mma_family.cc where CMake builds kernels/mma,
// no_optional_families.cc otherwise.
#ifndef MATMUL_KERNELS_CUDA_OPTIONAL_FAMILIES_H_
#define MATMUL_KERNELS_CUDA_OPTIONAL_FAMILIES_H_

#include <vector>

#include "kernels/cuda/gemm_family_registry.h"

namespace matmul::cuda {

std::vector<FamilyFactory> OptionalFamilies();

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_OPTIONAL_FAMILIES_H_
