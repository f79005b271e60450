// Operand extents a region request may not have: outside the region, at
// offsets that are not multiples of the element size, with sizes that
// overflow, and an output overlapping an input (also through a second
// registration of the same object).
#include <cstdint>
#include <string>

#include "client/regions/region_request_builder.h"
#include "client/request_builder.h"
#include "gtest/gtest.h"
#include "tests/regions_fixture.h"

namespace matmul {
namespace {

using region_tests::kTimeout;
using region_tests::RegionTest;

TEST_F(RegionTest, ExtentsOutsideTheRegion) {
  const RegionRequest placed = SmallInRegion();
  const uint64_t size = static_cast<uint64_t>(kSegmentBytes);
  v1::MatmulRequest request = placed.request;
  // A is 5x7 BF16 = 70 bytes: the last one that fits starts at size - 70.
  request.mutable_a()->mutable_region()->set_offset_bytes(size - 70);
  ASSERT_TRUE(daemon_.client().Matmul(request, kTimeout).ok());
  request.mutable_a()->mutable_region()->set_offset_bytes(size - 68);
  ExpectRejected(
      request, absl::StatusCode::kInvalidArgument,
      absl::StrCat("A: bytes [", size - 68, ", +70) reach outside region '",
                   region_->id(), "' of ", size, " bytes"));
  request.mutable_a()->mutable_region()->set_offset_bytes(size);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "reach outside region");
  request.mutable_a()->mutable_region()->set_offset_bytes(size * 4);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "reach outside region");
  // An offset that would wrap around 64 bits with the extent added.
  request = placed.request;
  request.mutable_b()->mutable_region()->set_offset_bytes(~uint64_t{0} - 1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "B: bytes [18446744073709551614, +84) reach outside region");
  // C (the output) as well.
  request = placed.request;
  request.mutable_c()->mutable_region()->set_offset_bytes(size - 58);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument, "C: bytes [");
  // Strides that reach past the end from a valid offset.
  request = placed.request;
  // (B's 7 rows 2^20 elements apart span 12 MiB; the region has 8.)
  request.mutable_b()->add_strides(int64_t{1} << 20);
  request.mutable_b()->add_strides(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "reach outside region");
}

TEST_F(RegionTest, OffsetsThatAreNotMultiplesOfTheElementSize) {
  const RegionRequest placed = SmallInRegion();
  v1::MatmulRequest request = placed.request;
  request.mutable_a()->mutable_region()->set_offset_bytes(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "A: region offset 1 is not a multiple of the element size 2");
  request = placed.request;
  request.mutable_b()->mutable_region()->set_offset_bytes(4097);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "B: region offset 4097 is not a multiple of the element "
                 "size 2");
  // An FP32 output needs 4-byte steps: 2 is fine for BF16, not for it.
  request = placed.request;
  request.set_out_dtype(v1::DTYPE_FP32);
  request.mutable_c()->set_dtype(v1::DTYPE_FP32);
  request.mutable_c()->mutable_region()->set_offset_bytes(4098);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C: region offset 4098 is not a multiple of the element "
                 "size 4");
}

TEST_F(RegionTest, SizesThatOverflow) {
  const RegionRequest placed = SmallInRegion();
  v1::MatmulRequest request = placed.request;
  // Dimensions in range each, strides whose span overflows int64.
  request.mutable_a()->clear_shape();
  for (int i = 0; i < 3; ++i) request.mutable_a()->add_shape(int64_t{1} << 23);
  request.mutable_a()->add_strides(int64_t{1} << 62);
  request.mutable_a()->add_strides(int64_t{1} << 30);
  request.mutable_a()->add_strides(1);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "overflows 64 bits");
  // An extent that fits int64 but not the region (nor the tensor limit).
  request = placed.request;
  request.mutable_b()->add_strides(int64_t{1} << 60);
  request.mutable_b()->add_strides(1);
  absl::StatusOr<v1::MatmulResponse> response =
      daemon_.client().Matmul(request, kTimeout);
  ASSERT_FALSE(response.ok());
  EXPECT_TRUE(response.status().code() == absl::StatusCode::kInvalidArgument ||
              response.status().code() == absl::StatusCode::kResourceExhausted)
      << response.status();
  // RegisterRegion: offset + size past 2^64, and past int64.
  ExpectShmRejected(segment_->name(), ~uint64_t{0} - 10, 100,
                    absl::StatusCode::kInvalidArgument,
                    "is empty or overflows");
  ExpectShmRejected(segment_->name(), uint64_t{1} << 62, uint64_t{1} << 62,
                    absl::StatusCode::kInvalidArgument,
                    "is empty or overflows");
  ExpectStillServing();
}

TEST_F(RegionTest, OutputOverlappingAnInput) {
  const RegionRequest placed = SmallInRegion();
  v1::MatmulRequest request = placed.request;
  request.mutable_c()->mutable_region()->set_offset_bytes(
      placed.a_offset_bytes + 8);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C overlaps A or B in memory");
  request = placed.request;
  request.mutable_c()->mutable_region()->set_offset_bytes(
      placed.b_offset_bytes);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C overlaps A or B in memory");
  // With beta != 0 as well (C read and written): still refused.
  request.set_beta(1.0f);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C overlaps A or B in memory");
  // A and B may share bytes (both only read).
  request = placed.request;
  request.mutable_b()->mutable_region()->set_offset_bytes(
      placed.a_offset_bytes);
  auto response = daemon_.client().Matmul(request, kTimeout);
  EXPECT_TRUE(response.ok()) << response.status();
  // C right after B's last byte (84 bytes) does not overlap.
  request = placed.request;
  request.mutable_c()->mutable_region()->set_offset_bytes(
      placed.b_offset_bytes + 84);
  response = daemon_.client().Matmul(request, kTimeout);
  EXPECT_TRUE(response.ok()) << response.status();
}

// Two registrations of one shm object are two mappings at different
// addresses: the overlap check must compare the object, not addresses.
TEST_F(RegionTest, OutputAliasingAnInputThroughAnotherRegion) {
  const RegionRequest placed = SmallInRegion();
  auto alias =
      RegisteredRegion::RegisterShm(daemon_.client(), *session_, *segment_);
  ASSERT_TRUE(alias.ok()) << alias.status();
  v1::MatmulRequest request = placed.request;
  request.mutable_c()->mutable_region()->set_region_id((*alias)->id());
  request.mutable_c()->mutable_region()->set_offset_bytes(
      placed.a_offset_bytes);
  ExpectRejected(request, absl::StatusCode::kInvalidArgument,
                 "C overlaps A or B in memory");
}

}  // namespace
}  // namespace matmul
