// Regions belong to a session: invisible to other sessions, limited by the
// session's quotas, released when it closes; and the session and segment
// helpers themselves.
#include <cstdint>
#include <memory>
#include <string>

#include "client/client.h"
#include "client/regions/shared_memory_segment.h"
#include "client/session.h"
#include "gtest/gtest.h"
#include "tests/regions_fixture.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using region_tests::kTimeout;
using region_tests::RegionTest;
using region_tests::ShmExists;
using ::testing::HasSubstr;

TEST_F(RegionTest, RegionsAreInvisibleToOtherSessions) {
  auto other = Session::Open(daemon_.client(), "intruder");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE((*other)->session_id(), session_->session_id());
  EXPECT_EQ(daemon_.server().regions().session_count(), 2);

  RegionRequest placed = SmallInRegion();
  placed.request.set_session_id((*other)->session_id());
  ExpectRejected(placed.request, absl::StatusCode::kNotFound,
                 absl::StrCat("region '", region_->id(),
                              "' is not registered in this session"));

  v1::UnregisterRegionRequest unregister;
  unregister.set_session_id((*other)->session_id());
  unregister.set_region_id(region_->id());
  EXPECT_EQ(
      daemon_.client().UnregisterRegion(unregister, kTimeout).status().code(),
      absl::StatusCode::kNotFound);
  auto listed = daemon_.client().ListRegions((*other)->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->regions_size(), 0);
  // Still registered, and still ours.
  EXPECT_EQ(daemon_.server().regions().region_count(), 1);
  ExpectStillServing();
}

TEST_F(RegionTest, UnknownSessionOrRegion) {
  RegionRequest placed = SmallInRegion();
  v1::MatmulRequest request = placed.request;
  request.set_session_id("0123456789abcdef0123456789abcdef");
  ExpectRejected(request, absl::StatusCode::kNotFound, "unknown session");

  request = placed.request;
  request.mutable_b()->mutable_region()->set_region_id(
      "00000000000000000000000000000000");
  ExpectRejected(request, absl::StatusCode::kNotFound,
                 "region '00000000000000000000000000000000' is not registered "
                 "in this session");

  request = placed.request;
  request.clear_session_id();
  ExpectRejected(
      request, absl::StatusCode::kInvalidArgument,
      "names region '" + region_->id() + "' but the request has no session_id");

  request = placed.request;
  request.mutable_a()->mutable_region()->clear_region_id();
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "A: region reference without a region_id");

  // The region RPCs with an unknown session.
  auto registered = RegisterShm(segment_->name(), 0, 4096);
  ASSERT_TRUE(registered.ok());  // our own session works...
  v1::RegisterRegionRequest stranger;
  stranger.set_session_id("feedfacefeedfacefeedfacefeedface");
  stranger.mutable_shm()->set_name(segment_->name());
  stranger.mutable_shm()->set_size_bytes(4096);
  auto refused = daemon_.client().RegisterRegion(stranger, kTimeout);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("unknown session"));
  EXPECT_EQ(daemon_.client()
                .ListRegions("feedfacefeedfacefeedfacefeedface", kTimeout)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(daemon_.client().ListRegions("", kTimeout).status().code(),
            absl::StatusCode::kNotFound);
}

class QuotaTest : public RegionTest {
 protected:
  static ServerOptions Options() {
    ServerOptions options = TestDaemon::DefaultOptions();
    options.regions.max_regions_per_session = 3;
    options.regions.max_region_bytes_per_session = kSegmentBytes + (1 << 20);
    return options;
  }
  QuotaTest() : RegionTest(Options()) {}
};

TEST_F(QuotaTest, RegionCountAndBytesPerSession) {
  // The fixture's region holds kSegmentBytes; 1 MiB of quota is left.
  auto small = RegisterShm(segment_->name(), 0, 512 << 10);
  ASSERT_TRUE(small.ok()) << small.status();
  auto too_big = RegisterShm(segment_->name(), 0, (512 << 10) + 1);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("would exceed the session's quota of"));
  auto third = RegisterShm(segment_->name(), 0, 4096);
  ASSERT_TRUE(third.ok()) << third.status();
  auto fourth = RegisterShm(segment_->name(), 0, 4096);
  EXPECT_EQ(fourth.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(fourth.status().message()),
              HasSubstr("the session already has 3 regions, the most one "
                        "session may register"));
  EXPECT_EQ(daemon_.server().regions().region_count(), 3);
  // Quotas are per session: another one starts from zero.
  auto other = Session::Open(daemon_.client(), "other");
  ASSERT_TRUE(other.ok());
  auto elsewhere = RegisteredRegion::RegisterShm(daemon_.client(), **other,
                                                 *segment_, 0, 4096);
  EXPECT_TRUE(elsewhere.ok()) << elsewhere.status();
  // Unregistering gives room back.
  v1::UnregisterRegionRequest unregister;
  unregister.set_session_id(session_->session_id());
  unregister.set_region_id(small->region_id());
  ASSERT_TRUE(daemon_.client().UnregisterRegion(unregister, kTimeout).ok());
  // Exactly up to the quota (8 MiB + 4 KiB held, 1 MiB - 4 KiB more).
  auto again = RegisterShm(segment_->name(), 0, (1 << 20) - 4096);
  EXPECT_TRUE(again.ok()) << again.status();
  ExpectStillServing();
}

TEST_F(RegionTest, ClosingTheSessionReleasesItsRegions) {
  auto second = RegisteredRegion::RegisterShm(daemon_.client(), *session_,
                                              *segment_, 8192, 8192);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(daemon_.server().regions().region_count(), 2);
  EXPECT_EQ(MappingsOf(segment_->name()), 3);
  // Regions left registered on purpose: the session's end must free them.
  const std::string name = segment_->name();
  session_.reset();
  EXPECT_TRUE(WaitFor([&] {
    return daemon_.server().regions().session_count() == 0 &&
           daemon_.server().regions().region_count() == 0;
  }));
  EXPECT_TRUE(WaitFor([&] { return MappingsOf(name) == 1; }));
  // The wrappers' late UnregisterRegion meets NOT_FOUND, silently.
  second->reset();
  region_.reset();
}

TEST(SessionTest, DaemonShutdownEndsTheSession) {
  auto daemon = std::make_unique<TestDaemon>();
  auto session = Session::Open(daemon->client(), "shutdown");
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_TRUE((*session)->alive());
  EXPECT_EQ(daemon->server().regions().session_count(), 1);
  daemon->server().Shutdown(absl::Seconds(5));
  EXPECT_TRUE(WaitFor([&] { return !(*session)->alive(); }));
  session->reset();  // after the daemon ended the stream: returns at once
}

TEST(SessionTest, OpenFailsWithoutADaemon) {
  auto client = Client::Create("unix:" + FreshSocketPath());
  ASSERT_TRUE(client.ok());
  auto session = Session::Open(**client, "nobody", absl::Seconds(5));
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnavailable)
      << session.status();
}

TEST(SharedMemorySegmentTest, CreateMapsZeroedMemoryAndUnlinks) {
  auto segment = SharedMemorySegment::Create(10000, "matmul.test");
  ASSERT_TRUE(segment.ok()) << segment.status();
  const std::string name = (*segment)->name();
  EXPECT_THAT(name, ::testing::StartsWith("matmul.test-"));
  EXPECT_TRUE(ShmExists(name));
  EXPECT_EQ((*segment)->size_bytes(), 10000);
  EXPECT_EQ((*segment)->data()[9999], 0);
  (*segment)->data()[9999] = 42;
  segment->reset();
  EXPECT_FALSE(ShmExists(name));
  EXPECT_EQ(SharedMemorySegment::Create(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemorySegment::Create(1, "bad/prefix").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace matmul
