#include "server/regions/region_registry.h"

#include <memory>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/regions/testing/test_region.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Region> MakeRegion(int64_t size,
                                   std::shared_ptr<bool> released = nullptr) {
  return MakeTestRegion({.size = size, .released = std::move(released)});
}

const PeerCredentials kOwner{.pid = 4242, .uid = 1000, .gid = 1000};
const PeerCredentials kOtherProcess{.pid = 4243, .uid = 1000, .gid = 1000};
const PeerCredentials kOtherUser{.pid = 4242, .uid = 1001, .gid = 1000};

TEST(RegionRegistryTest, OnlyTheOwningProcessUsesItsSession) {
  RegionRegistry registry({});
  const std::string session = registry.OpenSession("test", kOwner);
  EXPECT_TRUE(registry.CheckOwner(session, kOwner).ok());
  for (const PeerCredentials& stranger : {kOtherProcess, kOtherUser}) {
    EXPECT_EQ(registry.CheckOwner(session, stranger).code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(registry.Add(session, stranger, MakeRegion(64)).status().code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(registry.List(session, stranger).status().code(),
              absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(registry.AddRing(session, stranger).code(),
              absl::StatusCode::kPermissionDenied);
  }
  absl::StatusOr<std::string> id =
      registry.Add(session, kOwner, MakeRegion(64));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(registry.Remove(session, kOtherProcess, *id).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry.region_count(), 1);
  EXPECT_EQ(registry.CheckOwner("no-such-session", kOwner).code(),
            absl::StatusCode::kNotFound);
}

TEST(RegionRegistryTest, RegionsAreVisibleOnlyInTheirSession) {
  RegionRegistry registry({});
  const std::string mine = registry.OpenSession("a", kOwner);
  const std::string theirs = registry.OpenSession("b", kOtherProcess);
  EXPECT_NE(mine, theirs);
  absl::StatusOr<std::string> id = registry.Add(mine, kOwner, MakeRegion(64));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->size(), 32u);  // 128 random bits as hex
  EXPECT_TRUE(registry.Find(mine, *id).ok());
  EXPECT_EQ(registry.Find(theirs, *id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Remove(theirs, kOtherProcess, *id).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RegionRegistryTest, CountAndByteQuotasHoldAndFreeUpOnRemove) {
  std::mt19937_64 rng(std::random_device{}());
  const int64_t size = std::uniform_int_distribution<int64_t>(1, 1 << 20)(rng);
  RegionRegistry registry(
      {.max_regions_per_session = 3, .max_region_bytes_per_session = 3 * size});
  const std::string session = registry.OpenSession("q", kOwner);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::string> id =
        registry.Add(session, kOwner, MakeRegion(size));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  absl::StatusOr<std::string> over =
      registry.Add(session, kOwner, MakeRegion(1));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("3 regions"));

  ASSERT_TRUE(registry.Remove(session, kOwner, ids[0]).ok());
  // One place and `size` bytes are free again: one more byte is too many.
  absl::StatusOr<std::string> too_big =
      registry.Add(session, kOwner, MakeRegion(size + 1));
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.status().message(), HasSubstr("quota"));
  EXPECT_TRUE(registry.Add(session, kOwner, MakeRegion(size)).ok());

  // The quotas are per session: another session starts empty.
  const std::string other = registry.OpenSession("q2", kOtherProcess);
  EXPECT_TRUE(registry.Add(other, kOtherProcess, MakeRegion(3 * size)).ok());
  EXPECT_EQ(registry.TotalsByKind()["test"].regions, 4);
  EXPECT_EQ(registry.TotalsByKind()["test"].bytes, 6 * size);
}

TEST(RegionRegistryTest, RemoveDefersTheReleaseWhileARequestHoldsIt) {
  RegionRegistry registry({});
  const std::string session = registry.OpenSession("d", kOwner);
  auto released = std::make_shared<bool>(false);
  absl::StatusOr<std::string> id =
      registry.Add(session, kOwner, MakeRegion(128, released));
  ASSERT_TRUE(id.ok());

  absl::StatusOr<std::shared_ptr<Region>> in_use = registry.Find(session, *id);
  ASSERT_TRUE(in_use.ok());
  absl::StatusOr<std::vector<RegionSummary>> listed =
      registry.List(session, kOwner);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].requests_in_flight, 1);

  absl::StatusOr<bool> deferred = registry.Remove(session, kOwner, *id);
  ASSERT_TRUE(deferred.ok());
  EXPECT_TRUE(*deferred);
  EXPECT_FALSE(*released);  // the request still reads it
  EXPECT_EQ(registry.Find(session, *id).status().code(),
            absl::StatusCode::kNotFound);
  in_use->reset();
  EXPECT_TRUE(*released);

  // Without a user the release is immediate.
  auto released_now = std::make_shared<bool>(false);
  id = registry.Add(session, kOwner, MakeRegion(128, released_now));
  ASSERT_TRUE(id.ok());
  deferred = registry.Remove(session, kOwner, *id);
  ASSERT_TRUE(deferred.ok());
  EXPECT_FALSE(*deferred);
  EXPECT_TRUE(*released_now);
}

TEST(RegionRegistryTest, ClosingASessionReleasesItsRegions) {
  RegionRegistry registry({});
  const std::string session = registry.OpenSession("c", kOwner);
  auto released = std::make_shared<bool>(false);
  ASSERT_TRUE(registry.Add(session, kOwner, MakeRegion(8, released)).ok());
  EXPECT_EQ(registry.session_count(), 1);
  registry.CloseSession(session);
  EXPECT_TRUE(*released);
  EXPECT_EQ(registry.session_count(), 0);
  EXPECT_EQ(registry.region_count(), 0);
  EXPECT_EQ(registry.CheckOwner(session, kOwner).code(),
            absl::StatusCode::kNotFound);
}

TEST(RegionRegistryTest, ASessionClosedByTheDrainIsUnavailableNotUnknown) {
  RegionRegistry registry({});
  const std::string session = registry.OpenSession("d", kOwner);
  registry.Stop();
  EXPECT_TRUE(registry.CheckOwner(session, kOwner).ok());
  registry.CloseSession(session);
  for (const std::string& id : {session, std::string("no-such-session")}) {
    absl::Status status = registry.CheckOwner(id, kOwner);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_EQ(registry.Add(id, kOwner, MakeRegion(8)).status().code(),
              absl::StatusCode::kUnavailable);
  }
}

TEST(RegionRegistryTest, ASessionQueuesBehindTheOtherSessionsOfItsProcess) {
  // Two clients of one process may queue products on one CUDA stream: a
  // product of the second must not wait on the GPU while one the first
  // queued earlier (a lower number of the process) is not launched yet.
  RegionRegistry registry({});
  const std::string first = registry.OpenSession("first", kOwner);
  const std::string second = registry.OpenSession("second", kOwner);
  const std::string stranger = registry.OpenSession("other", kOtherProcess);
  absl::StatusOr<LaunchOrder::Ticket> earlier =
      registry.TakeLaunchTicket(first, 1, 1);
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  absl::StatusOr<LaunchOrder::Ticket> later =
      registry.TakeLaunchTicket(second, 2, 1);
  absl::StatusOr<LaunchOrder::Ticket> elsewhere =
      registry.TakeLaunchTicket(stranger, 2, 2);
  ASSERT_TRUE(later.ok() && elsewhere.ok());
  EXPECT_TRUE(earlier->EarlierLaunched());
  EXPECT_FALSE(later->EarlierLaunched());
  EXPECT_TRUE(elsewhere->EarlierLaunched());  // its own process's order
  earlier->MarkLaunched();
  EXPECT_TRUE(later->EarlierLaunched());

  // The order outlives the session that made it while the process has
  // another one open.
  absl::StatusOr<LaunchOrder::Ticket> pending =
      registry.TakeLaunchTicket(second, 3, 2);
  ASSERT_TRUE(pending.ok());
  registry.CloseSession(first);
  const std::string third = registry.OpenSession("third", kOwner);
  absl::StatusOr<LaunchOrder::Ticket> behind =
      registry.TakeLaunchTicket(third, 4, 2);
  ASSERT_TRUE(behind.ok());
  EXPECT_FALSE(behind->EarlierLaunched());
  EXPECT_EQ(registry.TakeLaunchTicket("no-such-session", 1, 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RegionRegistryTest, RingQuotaCountsAttachedRings) {
  RegionRegistry registry({.max_rings_per_session = 2});
  const std::string session = registry.OpenSession("r", kOwner);
  EXPECT_TRUE(registry.AddRing(session, kOwner).ok());
  EXPECT_TRUE(registry.AddRing(session, kOwner).ok());
  EXPECT_EQ(registry.AddRing(session, kOwner).code(),
            absl::StatusCode::kResourceExhausted);
  registry.RemoveRing(session);
  EXPECT_TRUE(registry.AddRing(session, kOwner).ok());
  // Giving back more than was taken does not open extra places.
  for (int i = 0; i < 5; ++i) registry.RemoveRing(session);
  EXPECT_TRUE(registry.AddRing(session, kOwner).ok());
  EXPECT_TRUE(registry.AddRing(session, kOwner).ok());
  EXPECT_EQ(registry.AddRing(session, kOwner).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(RegionRegistryTest, ASharedRegionIsOpenedReadOnlyByThoseItsAccessAdmits) {
  RegionRegistry registry({});
  const std::string owner = registry.OpenSession("owner", kOwner);
  const std::string same_user = registry.OpenSession("a", kOtherProcess);
  const PeerCredentials group_mate{.pid = 5000, .uid = 1002, .gid = 1000};
  const PeerCredentials stranger{.pid = 5001, .uid = 1003, .gid = 2000};
  const std::string in_group = registry.OpenSession("b", group_mate);
  const std::string elsewhere = registry.OpenSession("c", stranger);
  absl::StatusOr<std::string> weight =
      registry.Add(owner, kOwner, MakeRegion(4096));
  ASSERT_TRUE(weight.ok());
  absl::StatusOr<std::string> user_token =
      registry.Share(owner, kOwner, *weight, ShareAccess::kSameUser);
  absl::StatusOr<std::string> group_token =
      registry.Share(owner, kOwner, *weight, ShareAccess::kSameGroup);
  ASSERT_TRUE(user_token.ok() && group_token.ok());
  EXPECT_NE(*user_token, *group_token);
  // Only the owner shares its region.
  EXPECT_EQ(
      registry.Share(same_user, kOtherProcess, *weight, ShareAccess::kAnyLocal)
          .status()
          .code(),
      absl::StatusCode::kNotFound);

  absl::StatusOr<std::string> opened =
      registry.OpenShared(same_user, kOtherProcess, *user_token);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_NE(*opened, *weight);
  absl::StatusOr<std::shared_ptr<Region>> view =
      registry.Find(same_user, *opened);
  ASSERT_TRUE(view.ok());
  EXPECT_FALSE((*view)->writable());
  EXPECT_EQ((*view)->kind(), "shared");
  EXPECT_EQ((*view)->placement().object,
            (*registry.Find(owner, *weight))->placement().object);
  // An opening is not the opener's to share again.
  EXPECT_EQ(
      registry.Share(same_user, kOtherProcess, *opened, ShareAccess::kAnyLocal)
          .status()
          .code(),
      absl::StatusCode::kPermissionDenied);

  EXPECT_EQ(
      registry.OpenShared(in_group, group_mate, *user_token).status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(registry.OpenShared(in_group, group_mate, *group_token).ok());
  absl::Status refused =
      registry.OpenShared(elsewhere, stranger, *group_token).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("uid 1003"));
  EXPECT_EQ(
      registry.OpenShared(elsewhere, stranger, "no-such-token").status().code(),
      absl::StatusCode::kNotFound);
  // Someone else's session is still refused, token or not.
  EXPECT_EQ(
      registry.OpenShared(owner, kOtherProcess, *user_token).status().code(),
      absl::StatusCode::kPermissionDenied);
}

TEST(RegionRegistryTest, TheOwnerGoingAwayWithdrawsItsSharesAndTheirOpenings) {
  RegionRegistry registry({});
  auto released = std::make_shared<bool>(false);
  const std::string owner = registry.OpenSession("owner", kOwner);
  const std::string user = registry.OpenSession("user", kOtherProcess);
  absl::StatusOr<std::string> weight =
      registry.Add(owner, kOwner, MakeRegion(4096, released));
  ASSERT_TRUE(weight.ok());
  absl::StatusOr<std::string> token =
      registry.Share(owner, kOwner, *weight, ShareAccess::kSameUser);
  ASSERT_TRUE(token.ok());
  absl::StatusOr<std::string> opened =
      registry.OpenShared(user, kOtherProcess, *token);
  ASSERT_TRUE(opened.ok());
  // A product in flight holds the opening.
  absl::StatusOr<std::shared_ptr<Region>> in_flight =
      registry.Find(user, *opened);
  ASSERT_TRUE(in_flight.ok());

  registry.CloseSession(owner);
  absl::Status gone = registry.Find(user, *opened).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr("withdrawn"));
  EXPECT_EQ(registry.OpenShared(user, kOtherProcess, *token).status().code(),
            absl::StatusCode::kNotFound);
  // The memory stays mapped for the product in flight, then goes.
  EXPECT_FALSE(*released);
  EXPECT_EQ((*in_flight)->size_bytes(), 4096);
  in_flight->reset();
  EXPECT_TRUE(*released);
  EXPECT_EQ(registry.region_count(), 0);

  // Unregistering the region withdraws its shares too; the removal is
  // deferred while an opening is in use.
  const std::string again = registry.OpenSession("owner", kOwner);
  weight = registry.Add(again, kOwner, MakeRegion(64));
  token = registry.Share(again, kOwner, *weight, ShareAccess::kAnyLocal);
  ASSERT_TRUE(token.ok());
  opened = registry.OpenShared(user, kOtherProcess, *token);
  ASSERT_TRUE(opened.ok());
  in_flight = registry.Find(user, *opened);
  EXPECT_EQ(registry.Remove(again, kOwner, *weight).value_or(false), true);
  EXPECT_FALSE(registry.Find(user, *opened).ok());
  in_flight->reset();
  // The opener's own regions are its to remove; the share is unaffected
  // by an opener leaving.
  weight = registry.Add(again, kOwner, MakeRegion(64));
  token = registry.Share(again, kOwner, *weight, ShareAccess::kAnyLocal);
  opened = registry.OpenShared(user, kOtherProcess, *token);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(registry.Remove(user, kOtherProcess, *opened).value_or(true),
            false);
  registry.CloseSession(user);
  EXPECT_TRUE(registry.Find(again, *weight).ok());
  const std::string later = registry.OpenSession("later", kOtherProcess);
  EXPECT_TRUE(registry.OpenShared(later, kOtherProcess, *token).ok());
}

}  // namespace
}  // namespace matmul
