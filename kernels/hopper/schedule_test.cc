// The persistent grid's work list (internal/schedule.h), which the kernel
// walks and the host sizes the workspace from; no GPU needed.
#include "kernels/hopper/internal/schedule.h"

#include <vector>

#include "gtest/gtest.h"

namespace matmul::hopper::internal {
namespace {

// Every tile's K range is covered exactly once, in order, by the units;
// the split ones come last, one round's worth at most, each part at least
// kMinPartKSteps long.
void CheckCovers(int tiles, int clusters, int k_steps, bool split) {
  SCOPED_TRACE(testing::Message()
               << tiles << " tiles, " << clusters << " clusters, " << k_steps
               << " k-steps" << (split ? ", split" : ""));
  const Schedule s(tiles, clusters, k_steps, split);
  std::vector<int> next_k(tiles, 0);
  for (int u = 0; u < s.units; ++u) {
    const Unit unit = UnitOf(s, u, k_steps);
    ASSERT_GE(unit.tile, 0);
    ASSERT_LT(unit.tile, tiles);
    EXPECT_EQ(unit.k_begin, next_k[unit.tile]) << "unit " << u;
    EXPECT_GT(unit.k_end, unit.k_begin) << "unit " << u;
    next_k[unit.tile] = unit.k_end;
    if (unit.split >= 0) {
      EXPECT_GE(u, s.whole);
      EXPECT_LT(unit.split, s.split_tiles());
      EXPECT_LT(unit.part, s.parts);
      EXPECT_GE(unit.k_end - unit.k_begin, kMinPartKSteps);
    } else {
      EXPECT_LT(u, s.whole);
    }
  }
  for (int t = 0; t < tiles; ++t) EXPECT_EQ(next_k[t], k_steps) << "tile " << t;
  if (s.parts > 1) {
    // The whole tiles fill full rounds, and the split units fit in the
    // last one: each cluster takes one at most.
    EXPECT_EQ(s.whole % clusters, 0);
    EXPECT_LE(s.units - s.whole, clusters);
  } else {
    EXPECT_EQ(s.units, tiles);
  }
}

TEST(HopperScheduleTest, UnitsCoverEveryTileOnce) {
  for (const int clusters : {1, 2, 66, 132}) {
    for (const int tiles : {1, 7, 66, 80, 132, 133, 320, 860, 1720}) {
      for (const int k_steps : {1, 3, 4, 8, 32, 172}) {
        CheckCovers(tiles, clusters, k_steps, /*split=*/true);
        CheckCovers(tiles, clusters, k_steps, /*split=*/false);
      }
    }
  }
}

TEST(HopperScheduleTest, SplitsOnlyAnUnfilledLastRound) {
  // 1720 tiles on 132 blocks: 13 full rounds and 4 tiles left, each split
  // as far as K allows (32 k-steps: 8 parts of 4).
  Schedule s(1720, 132, 32, true);
  EXPECT_EQ(s.whole, 1716);
  EXPECT_EQ(s.parts, 8);
  EXPECT_EQ(s.split_tiles(), 4);
  // Full rounds only: nothing to split.
  s = Schedule(1716, 132, 32, true);
  EXPECT_EQ(s.parts, 1);
  EXPECT_EQ(s.units, 1716);
  // Fewer tiles than blocks: the only round is the last. 16 tiles (16 x
  // 4096 x 4096) split 8 ways; 80 (5120 x 512) stay whole, as 2 parts each
  // would not fit the round.
  EXPECT_EQ(Schedule(16, 132, 64, true).parts, 8);
  EXPECT_EQ(Schedule(16, 132, 64, true).whole, 0);
  EXPECT_EQ(Schedule(80, 132, 32, true).parts, 1);
  // Too little K to split, or no workspace.
  EXPECT_EQ(Schedule(1720, 132, 7, true).parts, 1);
  EXPECT_EQ(Schedule(1720, 132, 32, false).parts, 1);
}

}  // namespace
}  // namespace matmul::hopper::internal
