// The soak's own parsing: Prometheus families, segment owners, scenario
// lists. (The soak itself runs as the soak_short test.)
#include <string>

#include "gtest/gtest.h"
#include "tests/soak/daemon_probe.h"
#include "tests/soak/soak_scenarios.h"

namespace matmul::soak {
namespace {

TEST(SumOfFamilyTest, SumsEveryLabelSetOfTheFamilyOnly) {
  const std::string scrape =
      "# HELP matmul_regions Regions registered\n"
      "# TYPE matmul_regions gauge\n"
      "matmul_regions{kind=\"shm\"} 3\n"
      "matmul_regions{kind=\"cuda_ipc\"} 2\n"
      "matmul_region_bytes{kind=\"shm\"} 4096\n"
      "matmul_sessions 7\n";
  EXPECT_EQ(SumOfFamily(scrape, "matmul_regions"), 5.0);
  EXPECT_EQ(SumOfFamily(scrape, "matmul_region_bytes"), 4096.0);
  EXPECT_EQ(SumOfFamily(scrape, "matmul_sessions"), 7.0);
  EXPECT_FALSE(SumOfFamily(scrape, "matmul_rings_attached").has_value());
  EXPECT_FALSE(SumOfFamily(scrape, "matmul_region").has_value());
}

TEST(SegmentOwnerPidTest, ReadsCxxAndPythonNames) {
  EXPECT_EQ(SegmentOwnerPid("soak-1234-4026531836-00ff00ff00ff00ff", "soak"),
            1234);
  EXPECT_EQ(SegmentOwnerPid("soak-1234-00ff00ff00ff00ff", "soak"), 1234);
  EXPECT_EQ(SegmentOwnerPid("soak-py77-3-abcdef", "soak"), 77);
  EXPECT_FALSE(SegmentOwnerPid("soak-x12-ab", "soak").has_value());
  EXPECT_FALSE(SegmentOwnerPid("other-12-ab", "soak").has_value());
  EXPECT_FALSE(SegmentOwnerPid("soak-12", "soak").has_value());
}

TEST(ParseScenariosTest, AllMinusOne) {
  absl::StatusOr<std::vector<Scenario>> all = ParseScenarios("all");
  ASSERT_TRUE(all.ok()) << all.status();
  absl::StatusOr<std::vector<Scenario>> some = ParseScenarios("all,-truncate");
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->size() + 1, all->size());
  EXPECT_EQ(ScenarioNames(*some).find("truncate"), std::string::npos);
  EXPECT_NE(ScenarioNames(*all).find("truncate"), std::string::npos);
  EXPECT_EQ(ScenarioNames(*all).find("product_ipc"), std::string::npos);
}

TEST(ParseScenariosTest, RefusesUnknownNamesAndEmptySets) {
  EXPECT_EQ(ParseScenarios("product_inline,nonsense").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseScenarios("kill,-kill").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<Scenario>> one = ParseScenarios("kill,kill");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
}

}  // namespace
}  // namespace matmul::soak
