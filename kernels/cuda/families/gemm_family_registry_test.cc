// The registry holds exactly the families this build has (no GPU needed):
// cuBLASLt always, the own kernels' families exactly where CMake built
// their libraries (MATMUL_TEST_EXPECTED_FAMILIES, "hopper,mma,cublaslt" or
// less, comes from the same CMake test).
#include "kernels/cuda/families/gemm_family_registry.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace matmul::cuda {
namespace {

std::vector<std::string> Names() {
  std::vector<std::string> names;
  for (const FamilyFactory& f : BuiltInFamilies()) names.push_back(f.name);
  return names;
}

TEST(GemmFamilyRegistry, HoldsTheFamiliesThisBuildHas) {
  const std::vector<std::string> expected =
      absl::StrSplit(MATMUL_TEST_EXPECTED_FAMILIES, ',');
  EXPECT_EQ(Names(), expected);
  for (const std::string& name : expected) {
    EXPECT_TRUE(HasBuiltInFamily(name)) << name;
  }
  EXPECT_FALSE(HasBuiltInFamily("cutlass"));
  for (const FamilyFactory& f : BuiltInFamilies()) {
    EXPECT_NE(f.create, nullptr) << f.name;
  }
}

}  // namespace
}  // namespace matmul::cuda
