// A region shared between sessions (ShareRegion, RegisterRegion.shared):
// another session reads B from it and gets the right product, may not
// write C to it, and loses it when the owner unregisters the region.
#include <memory>
#include <string>

#include "client/regions/registered_region.h"
#include "client/session.h"
#include "tests/regions_fixture.h"

namespace matmul::region_tests {
namespace {

TEST_F(RegionTest, ASharedRegionServesAnotherSessionsProductsReadOnly) {
  absl::StatusOr<std::string> token = region_->Share();
  ASSERT_TRUE(token.ok()) << token.status();
  absl::StatusOr<std::unique_ptr<Session>> user =
      Session::Open(daemon_.client(), "user");
  ASSERT_TRUE(user.ok()) << user.status();
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> shared =
      RegisteredRegion::RegisterShared(daemon_.client(), **user, *token);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_NE((*shared)->id(), region_->id());
  EXPECT_EQ((*shared)->size_bytes(), static_cast<uint64_t>(kSegmentBytes));
  absl::StatusOr<v1::ListRegionsResponse> listed =
      daemon_.client().ListRegions((*user)->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->regions_size(), 1);
  EXPECT_EQ(listed->regions(0).kind(), "shared");

  // The owner's weight (B) in its region, A and C inline, sent by the
  // other session under its own id for the region.
  auto request = MakeRandomRequest({.m = 9, .n = 33, .k = 17}, rng_);
  ASSERT_TRUE(request.ok());
  absl::StatusOr<RegionRequest> placed =
      PlaceInRegion(*request, segment_->bytes(), region_->id(),
                    session_->session_id(), {.a = false, .c = false});
  ASSERT_TRUE(placed.ok()) << placed.status();
  placed->request.set_session_id((*user)->session_id());
  placed->request.mutable_b()->mutable_region()->set_region_id((*shared)->id());
  absl::StatusOr<v1::MatmulResponse> response =
      daemon_.client().Matmul(placed->request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
  absl::StatusOr<double> error =
      CheckRegionResponse(*placed, *response, segment_->bytes());
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);

  // C in the shared region: refused, and nothing written.
  RegionRequest writes = SmallInRegion();
  writes.request.set_session_id((*user)->session_id());
  for (v1::Tensor* t : {writes.request.mutable_a(), writes.request.mutable_b(),
                        writes.request.mutable_c()}) {
    t->mutable_region()->set_region_id((*shared)->id());
  }
  ExpectRejected(writes.request, absl::StatusCode::kPermissionDenied,
                 "to read from only");
  // Nor can the other session share it on.
  EXPECT_EQ((*shared)->Share().status().code(),
            absl::StatusCode::kPermissionDenied);

  // The owner unregisters the region: the share is withdrawn.
  ASSERT_TRUE(region_->Unregister().ok());
  response = daemon_.client().Matmul(placed->request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(response.status().message()), HasSubstr("withdrawn"));
  EXPECT_EQ(RegisteredRegion::RegisterShared(daemon_.client(), **user, *token)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(daemon_.server().regions().region_count(), 0);
}

}  // namespace
}  // namespace matmul::region_tests
