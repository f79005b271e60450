// OptionalFamilies() of a build without kernels/mma: none.
#include "kernels/cuda/optional_families.h"

namespace matmul::cuda {

std::vector<FamilyFactory> OptionalFamilies() { return {}; }

}  // namespace matmul::cuda
