// How a kernel family is made: the device settings it is made for and the
// factory a family registers. Its own header so that the families (which
// declare their factories) and the registry (which lists them) both depend
// on it rather than on each other.
#ifndef MATMUL_KERNELS_CUDA_FAMILIES_FAMILY_FACTORY_H_
#define MATMUL_KERNELS_CUDA_FAMILIES_FAMILY_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/cuda/families/gemm_family.h"

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

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_FAMILIES_FAMILY_FACTORY_H_
