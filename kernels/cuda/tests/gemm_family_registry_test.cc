// The registry holds exactly the families this build has (no GPU needed):
// cuBLASLt always, the mma family exactly where CMake built kernels/mma
// (MATMUL_TEST_EXPECT_MMA_FAMILY comes from the same CMake test).
#include "kernels/cuda/gemm_family_registry.h"

#include <string>
#include <vector>

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
      MATMUL_TEST_EXPECT_MMA_FAMILY
          ? std::vector<std::string>{"mma", "cublaslt"}
          : std::vector<std::string>{"cublaslt"};
  EXPECT_EQ(Names(), expected);
  EXPECT_TRUE(HasBuiltInFamily("cublaslt"));
  EXPECT_EQ(HasBuiltInFamily("mma"), MATMUL_TEST_EXPECT_MMA_FAMILY != 0);
  EXPECT_FALSE(HasBuiltInFamily("cutlass"));
  for (const FamilyFactory& f : BuiltInFamilies()) {
    EXPECT_NE(f.create, nullptr) << f.name;
  }
}

}  // namespace
}  // namespace matmul::cuda
