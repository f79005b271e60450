// The kernel families this build has, made once per selector at start-up.
// cuBLASLt is always there; optional families (the project's own mma and
// Hopper kernels) are compiled in only where their library is part of the
// build: CMake writes OptionalFamilies() (see optional_families.h), so a
// family that is not built is absent from the list rather than present and
// refusing.
#ifndef MATMUL_KERNELS_CUDA_GEMM_FAMILY_REGISTRY_H_
#define MATMUL_KERNELS_CUDA_GEMM_FAMILY_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/gemm_family.h"

namespace matmul::cuda {

// What a family needs to know of the device it serves.
struct FamilySettings {
  int device = 0;
  // Per-block shared memory limit for kernels that state theirs (> 0).
  int max_shared_bytes = 0;
  // How many candidates cuBLASLt's heuristic is asked for.
  int cublaslt_top_k = 8;
};

// A family this build can make.
struct FamilyFactory {
  std::string name;
  absl::StatusOr<std::unique_ptr<GemmFamily>> (*create)(
      const FamilySettings& settings);
};

// Every family of this build, in the order their candidates are listed and
// timed: the optional ones (the own kernels), then cuBLASLt.
std::vector<FamilyFactory> BuiltInFamilies();

// Whether the family called `name` is part of this build.
bool HasBuiltInFamily(const std::string& name);

// Makes every built-in family for `settings`, in BuiltInFamilies() order.
absl::StatusOr<std::vector<std::unique_ptr<GemmFamily>>> CreateFamilies(
    const FamilySettings& settings);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_GEMM_FAMILY_REGISTRY_H_
