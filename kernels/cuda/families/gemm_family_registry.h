// The kernel families this build has, made once per selector at start-up.
// cuBLASLt is always there; optional families (the project's own mma and
// Hopper kernels) are compiled in only where their library is part of the
// build: CMake writes OptionalFamilies() (see optional_families.h), so a
// family that is not built is absent from the list rather than present and
// refusing.
#ifndef MATMUL_KERNELS_CUDA_FAMILIES_GEMM_FAMILY_REGISTRY_H_
#define MATMUL_KERNELS_CUDA_FAMILIES_GEMM_FAMILY_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/families/family_factory.h"
#include "kernels/cuda/families/gemm_family.h"

namespace matmul::cuda {

// Every family of this build, in the order their candidates are listed and
// timed: the optional ones (the own kernels), then cuBLASLt.
std::vector<FamilyFactory> BuiltInFamilies();

// Whether the family called `name` is part of this build.
bool HasBuiltInFamily(const std::string& name);

// Makes every built-in family for `settings`, in BuiltInFamilies() order.
absl::StatusOr<std::vector<std::unique_ptr<GemmFamily>>> CreateFamilies(
    const FamilySettings& settings);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_FAMILIES_GEMM_FAMILY_REGISTRY_H_
