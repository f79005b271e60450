#include "kernels/cuda/families/gemm_family_registry.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "kernels/cuda/families/cublaslt_family.h"
#include "kernels/cuda/families/optional_families.h"

namespace matmul::cuda {

std::vector<FamilyFactory> BuiltInFamilies() {
  std::vector<FamilyFactory> factories = OptionalFamilies();
  factories.push_back({CublasLtFamily::kName, &CublasLtFamily::CreateFamily});
  return factories;
}

bool HasBuiltInFamily(const std::string& name) {
  const std::vector<FamilyFactory> factories = BuiltInFamilies();
  return std::any_of(factories.begin(), factories.end(),
                     [&](const FamilyFactory& f) { return f.name == name; });
}

absl::StatusOr<std::vector<std::unique_ptr<GemmFamily>>> CreateFamilies(
    const FamilySettings& settings) {
  std::vector<std::unique_ptr<GemmFamily>> families;
  for (const FamilyFactory& factory : BuiltInFamilies()) {
    ASSIGN_OR_RETURN(std::unique_ptr<GemmFamily> family,
                     factory.create(settings));
    families.push_back(std::move(family));
  }
  return families;
}

}  // namespace matmul::cuda
