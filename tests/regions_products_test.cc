// Products with operands in a registered shm region, checked against FP64,
// and the region's own life: listing, unregistering, unlinking the object.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "client/regions/region_request_builder.h"
#include "client/request_builder.h"
#include "gtest/gtest.h"
#include "tests/regions_fixture.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using region_tests::kTimeout;
using region_tests::RegionTest;
using region_tests::ShmExists;
using ::testing::HasSubstr;

ProblemSpec RandomSpec(int index, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> dim(1, 160);
  ProblemSpec spec{.m = dim(rng), .n = dim(rng), .k = dim(rng)};
  spec.transpose_a = index & 1;
  spec.transpose_b = index & 2;
  if (index % 4 == 3) spec.batch = 1 + static_cast<int64_t>(rng() % 4);
  if (index % 3 == 1) spec.alpha = -1.25f;
  if (index % 5 == 2) spec.beta = 0.5f;
  if (index % 2 == 1) spec.out_dtype = DType::kFP32;
  if (spec.batch > 1) {
    spec.broadcast_a = index % 8 == 7;
    spec.broadcast_b = index % 16 == 3;
  }
  if (index % 7 == 4) spec.row_padding = 3;
  return spec;
}

TEST_F(RegionTest, RandomProductsInShmMatchFp64) {
  // Every mix of inline and region operands, rotating over random shapes,
  // the four transposes, batches, broadcasts, alpha/beta and both outputs.
  const RegionPlacement placements[] = {
      {.a = true, .b = true, .c = true},   {.a = true, .b = false, .c = true},
      {.a = false, .b = true, .c = true},  {.a = false, .b = false, .c = true},
      {.a = true, .b = true, .c = false},  {.a = true, .b = false, .c = false},
      {.a = false, .b = true, .c = false},
  };
  constexpr int kProducts = 56;  // each placement with each transpose pair
  int in_place = 0;
  for (int i = 0; i < kProducts; ++i) {
    ProblemSpec spec = RandomSpec(i, rng_);
    const RegionPlacement placement = placements[(i / 4) % 7];
    SCOPED_TRACE(absl::StrCat(ProblemSpecName(spec), " A:", placement.a,
                              " B:", placement.b, " C:", placement.c));
    absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(spec, rng_);
    ASSERT_TRUE(request.ok()) << request.status();
    request->set_request_id(i);
    // A varying base offset, so operands do not always start the region.
    const uint64_t base = (rng_() % 64) * 2;
    absl::StatusOr<RegionRequest> placed =
        PlaceInRegion(*request, segment_->bytes(), region_->id(),
                      session_->session_id(), placement, base);
    ASSERT_TRUE(placed.ok()) << placed.status();
    absl::StatusOr<v1::MatmulResponse> response =
        daemon_.client().Matmul(placed->request, kTimeout);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->request_id(), static_cast<uint64_t>(i));
    // An output written in place does not travel back inline.
    EXPECT_EQ(response->has_c(), !placement.c);
    absl::StatusOr<double> error =
        CheckRegionResponse(*placed, *response, segment_->bytes());
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, DefaultTolerance(spec.resolved_out_dtype()));
    in_place += placement.c;
  }
  EXPECT_EQ(in_place, 32);
}

TEST_F(RegionTest, RegionAtAnUnalignedOffsetOfItsObject) {
  // The daemon maps from the page holding the region's first byte; the
  // region's byte 0 must still be the object's byte `offset`.
  constexpr uint64_t kOffset = 4096 + 130;
  absl::StatusOr<std::unique_ptr<RegisteredRegion>> inner =
      RegisteredRegion::RegisterShm(daemon_.client(), *session_, *segment_,
                                    kOffset, 1 << 20);
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ((*inner)->size_bytes(), uint64_t{1} << 20);
  auto request = MakeRandomRequest(
      {.m = 33, .n = 17, .k = 65, .transpose_b = true, .beta = 1.0f}, rng_);
  ASSERT_TRUE(request.ok());
  absl::Span<char> memory = segment_->bytes().subspan(kOffset, 1 << 20);
  auto placed = PlaceInRegion(*request, memory, (*inner)->id(),
                              session_->session_id(), {});
  ASSERT_TRUE(placed.ok()) << placed.status();
  auto response = daemon_.client().Matmul(placed->request, kTimeout);
  ASSERT_TRUE(response.ok()) << response.status();
  auto error = CheckRegionResponse(*placed, *response, memory);
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-2);
}

TEST_F(RegionTest, ListRegionsAndUnregister) {
  auto listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->regions_size(), 1);
  EXPECT_EQ(listed->regions(0).region_id(), region_->id());
  EXPECT_EQ(listed->regions(0).kind(), "shm");
  EXPECT_EQ(listed->regions(0).size_bytes(),
            static_cast<uint64_t>(kSegmentBytes));
  EXPECT_EQ(listed->regions(0).requests_in_flight(), 0);
  EXPECT_EQ(region_->id().size(), 32u);        // 128 random bits, hex
  EXPECT_EQ(MappingsOf(segment_->name()), 2);  // ours and the daemon's

  const RegionRequest placed = SmallInRegion();
  auto deferred = region_->Unregister();
  ASSERT_TRUE(deferred.ok()) << deferred.status();
  EXPECT_FALSE(*deferred);  // nothing in flight
  EXPECT_EQ(region_->Unregister().status().code(),
            absl::StatusCode::kFailedPrecondition);
  listed = daemon_.client().ListRegions(session_->session_id(), kTimeout);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->regions_size(), 0);
  EXPECT_EQ(daemon_.server().regions().region_count(), 0);
  EXPECT_EQ(MappingsOf(segment_->name()), 1);  // the daemon unmapped it
  // Gone for good: the id no longer resolves.
  auto response = daemon_.client().Matmul(placed.request, kTimeout);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(response.status().message()),
              HasSubstr("is not registered in this session"));
  v1::UnregisterRegionRequest again;
  again.set_session_id(session_->session_id());
  again.set_region_id(region_->id());
  EXPECT_EQ(daemon_.client().UnregisterRegion(again, kTimeout).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(RegionTest, ObjectMayBeUnlinkedAfterRegistration) {
  // Unlinking right after registering (crash safety) keeps both mappings.
  segment_->Unlink();
  EXPECT_FALSE(ShmExists(segment_->name()));
  ExpectStillServing();
}

}  // namespace
}  // namespace matmul
