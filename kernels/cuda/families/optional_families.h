// The families of optional libraries this build links: the own mma.sync
// kernels (kernels/mma, mma_family.cc) and the own Hopper kernel
// (kernels/hopper, hopper_family.cc), each where CMake builds its library.
// CMake writes OptionalFamilies() (optional_families.cc.in) with the
// factories of those it builds.
#ifndef MATMUL_KERNELS_CUDA_FAMILIES_INTERNAL_OPTIONAL_FAMILIES_H_
#define MATMUL_KERNELS_CUDA_FAMILIES_INTERNAL_OPTIONAL_FAMILIES_H_

#include <vector>

#include "kernels/cuda/families/family_factory.h"

namespace matmul::cuda {

std::vector<FamilyFactory> OptionalFamilies();

// Defined by mma_family.cc and hopper_family.cc, where they are built.
FamilyFactory MmaFamilyFactory();
FamilyFactory HopperFamilyFactory();

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_FAMILIES_INTERNAL_OPTIONAL_FAMILIES_H_
