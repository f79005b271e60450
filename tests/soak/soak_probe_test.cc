// The soak's own parsing: Prometheus families, segment owners, scenario
// lists; and the raw view of a ring's mapping. (The soak itself runs as the
// soak_short test.)
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "client/shared_memory_segment.h"
#include "gtest/gtest.h"
#include "tests/soak/daemon_probe.h"
#include "tests/soak/raw_ring.h"
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

TEST(ParseScenariosTest, RingScenariosAreInAll) {
  absl::StatusOr<std::vector<Scenario>> all = ParseScenarios("all");
  ASSERT_TRUE(all.ok()) << all.status();
  const std::string names = ScenarioNames(*all);
  EXPECT_NE(names.find("ring_chaos"), std::string::npos);
  EXPECT_NE(names.find("ring_kill"), std::string::npos);
}

TEST(RawRingTest, FindsTheMappingAndWritesTheLayout) {
  constexpr uint32_t kSlots = 4, kSlotBytes = 512;
  const std::string prefix = absl::StrCat("soaktest", getpid());
  absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
      SharedMemorySegment::Create(ring::RingBytes(kSlots, kSlotBytes), prefix);
  ASSERT_TRUE(segment.ok()) << segment.status();
  (*segment)->Unlink();  // as a ring is once attached: "(deleted)"
  absl::StatusOr<Mapping> mapping = FindMapping((*segment)->name());
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  EXPECT_EQ(mapping->data, (*segment)->data());
  EXPECT_GE(mapping->bytes, ring::RingBytes(kSlots, kSlotBytes));
  // A name that only starts like it is another object.
  EXPECT_EQ(
      FindMapping((*segment)->name().substr(0, (*segment)->name().size() - 1))
          .status()
          .code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(RawRing::Open(*mapping, kSlots, 1 << 20).status().code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<RawRing> raw = RawRing::Open(*mapping, kSlots, kSlotBytes);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->payload_bytes(), kSlotBytes - sizeof(ring::SlotHeader));
  raw->WriteSlot(2, "abc", 100000, -5, /*notify=*/true, 7);
  char* base = (*segment)->data();
  ring::SlotHeader* slot = ring::Slot(base, kSlots, kSlotBytes, 2);
  EXPECT_EQ(slot->state.load(), 7u);
  EXPECT_EQ(slot->request_bytes, 100000u);
  EXPECT_EQ(slot->timeout_ns, -5);
  EXPECT_EQ(slot->notify, 1u);
  EXPECT_EQ(std::string(ring::Payload(slot), 3), "abc");

  EXPECT_EQ(raw->Reserve(2), 0u);
  EXPECT_EQ(raw->Reserve(), 2u);
  raw->Publish(5, 3);  // position 5: entry 1, sequence 6
  raw->Publish(2, 9, 77);
  EXPECT_EQ(ring::SubmitQueue(base)[1].sequence.load(), 6u);
  EXPECT_EQ(ring::SubmitQueue(base)[1].slot, 3u);
  EXPECT_EQ(ring::SubmitQueue(base)[2].sequence.load(), 77u);
  EXPECT_EQ(ring::Header(base)->doorbell.load(), 2u);

  // Completions of slot 1 at positions 0 and 2; position 1 unpublished.
  ring::QueueEntry* done = ring::CompleteQueue(base, kSlots);
  done[0].slot = 1;
  done[0].sequence.store(1);
  done[1].slot = 1;
  done[2].slot = 1;
  done[2].sequence.store(3);
  EXPECT_EQ(raw->CompletionsOf(1, 0, 3), 2);
  EXPECT_EQ(raw->CompletionsOf(1, 1, 3), 1);
  EXPECT_EQ(raw->CompletionsOf(0, 0, 3), 0);
}

}  // namespace
}  // namespace matmul::soak
