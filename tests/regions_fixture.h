// The fixture of the regions tests (tests/regions_*_test.cc, one
// executable): a CPU daemon, a session on it and one registered shm segment,
// with helpers that expect a request to be refused with a given status and
// message. In a named namespace so that every test file's RegionTest is the
// same class (gtest requires one fixture class per test suite).
#ifndef MATMUL_TESTS_REGIONS_FIXTURE_H_
#define MATMUL_TESTS_REGIONS_FIXTURE_H_

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/regions/region_request_builder.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/request_builder.h"
#include "client/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

namespace matmul::region_tests {

using ::testing::HasSubstr;

inline constexpr absl::Duration kTimeout = absl::Seconds(60);

inline bool ShmExists(const std::string& name) {
  return access(("/dev/shm/" + name).c_str(), F_OK) == 0;
}

// A daemon, a session on it, and one registered segment.
class RegionTest : public ::testing::Test {
 protected:
  explicit RegionTest(ServerOptions options = TestDaemon::DefaultOptions(),
                      int64_t segment_bytes = kSegmentBytes)
      : segment_bytes_(segment_bytes), daemon_(options) {}

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Session>> session =
        Session::Open(daemon_.client(), "regions_test");
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    absl::StatusOr<std::unique_ptr<SharedMemorySegment>> segment =
        SharedMemorySegment::Create(segment_bytes_);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
    absl::StatusOr<std::unique_ptr<RegisteredRegion>> region =
        RegisteredRegion::RegisterShm(daemon_.client(), *session_, *segment_);
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
  }

  void TearDown() override {
    region_.reset();
    session_.reset();
  }

  // A small product with A, B and C in the region (C at the end).
  RegionRequest SmallInRegion(RegionPlacement placement = {}) {
    auto request = MakeRandomRequest({.m = 5, .n = 6, .k = 7}, rng_);
    EXPECT_TRUE(request.ok());
    auto placed = PlaceInRegion(*request, segment_->bytes(), region_->id(),
                                session_->session_id(), placement);
    EXPECT_TRUE(placed.ok()) << placed.status();
    return *placed;
  }

  // Sends `request`, expects `code` with `text` in the message, then checks
  // that the daemon still serves a region product correctly.
  void ExpectRejected(const v1::MatmulRequest& request, absl::StatusCode code,
                      const std::string& text) {
    absl::StatusOr<v1::MatmulResponse> response =
        daemon_.client().Matmul(request, kTimeout);
    ASSERT_FALSE(response.ok()) << "the daemon accepted a bad request";
    EXPECT_EQ(response.status().code(), code) << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(text));
    ExpectStillServing();
  }

  void ExpectStillServing() {
    RegionRequest good = SmallInRegion();
    absl::StatusOr<v1::MatmulResponse> after =
        daemon_.client().Matmul(good.request, kTimeout);
    ASSERT_TRUE(after.ok()) << after.status();
    absl::StatusOr<double> error =
        CheckRegionResponse(good, *after, segment_->bytes());
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
  }

  absl::StatusOr<v1::RegisterRegionResponse> RegisterShm(
      const std::string& name, uint64_t offset, uint64_t size) {
    v1::RegisterRegionRequest request;
    request.set_session_id(session_->session_id());
    request.mutable_shm()->set_name(name);
    request.mutable_shm()->set_offset_bytes(offset);
    request.mutable_shm()->set_size_bytes(size);
    return daemon_.client().RegisterRegion(request, kTimeout);
  }

  void ExpectRegisterRejected(const v1::RegisterRegionRequest& request,
                              absl::StatusCode code, const std::string& text) {
    absl::StatusOr<v1::RegisterRegionResponse> response =
        daemon_.client().RegisterRegion(request, kTimeout);
    ASSERT_FALSE(response.ok()) << "registered: " << request.ShortDebugString();
    EXPECT_EQ(response.status().code(), code) << response.status();
    EXPECT_THAT(std::string(response.status().message()), HasSubstr(text));
    EXPECT_EQ(daemon_.server().regions().region_count(), 1);
  }

  void ExpectShmRejected(const std::string& name, uint64_t offset,
                         uint64_t size, absl::StatusCode code,
                         const std::string& text) {
    SCOPED_TRACE(absl::StrCat("shm '", name, "' [", offset, ", +", size, ")"));
    v1::RegisterRegionRequest request;
    request.set_session_id(session_->session_id());
    request.mutable_shm()->set_name(name);
    request.mutable_shm()->set_offset_bytes(offset);
    request.mutable_shm()->set_size_bytes(size);
    ExpectRegisterRejected(request, code, text);
  }

  static constexpr int64_t kSegmentBytes = int64_t{8} << 20;

  const int64_t segment_bytes_;
  std::mt19937_64 rng_{2026};
  TestDaemon daemon_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<SharedMemorySegment> segment_;
  std::unique_ptr<RegisteredRegion> region_;
};

}  // namespace matmul::region_tests

#endif  // MATMUL_TESTS_REGIONS_FIXTURE_H_
