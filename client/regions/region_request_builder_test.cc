#include "client/regions/region_request_builder.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::MatmulRequest Random(const ProblemSpec& spec) {
  std::mt19937_64 rng(17);
  absl::StatusOr<v1::MatmulRequest> request = MakeRandomRequest(spec, rng);
  EXPECT_TRUE(request.ok()) << request.status();
  return *request;
}

TEST(PlaceInRegionTest, CopiesOperandsToAlignedOffsets) {
  const v1::MatmulRequest request =
      Random({.m = 5, .n = 6, .k = 7, .transpose_b = true});
  std::vector<char> memory(4096, 0);
  absl::StatusOr<RegionRequest> placed = PlaceInRegion(
      request, absl::MakeSpan(memory), "region", "session", {}, 10);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->a_offset_bytes, 64u);     // 10 rounded up to 64
  EXPECT_EQ(placed->b_offset_bytes, 192u);    // A: 70 bytes
  EXPECT_EQ(placed->c_offset_bytes, 320u);    // B: 84 bytes
  EXPECT_EQ(placed->end_offset_bytes, 380u);  // C: 5x6 BF16
  EXPECT_EQ(*RegionBytesNeeded(request, {}, 10), 380u);
  EXPECT_TRUE(placed->output_in_region);
  EXPECT_THAT(placed->c_shape, ElementsAre(5, 6));

  const v1::MatmulRequest& sent = placed->request;
  EXPECT_EQ(sent.session_id(), "session");
  EXPECT_EQ(sent.a().region().region_id(), "region");
  EXPECT_EQ(sent.a().region().offset_bytes(), 64u);
  EXPECT_EQ(sent.b().region().offset_bytes(), 192u);
  EXPECT_EQ(sent.c().region().offset_bytes(), 320u);
  EXPECT_THAT(sent.b().shape(), ElementsAre(6, 7));
  EXPECT_TRUE(sent.transpose_b());
  EXPECT_EQ(
      0, std::memcmp(memory.data() + 64, request.a().inline_data().data(), 70));
  EXPECT_EQ(0, std::memcmp(memory.data() + 192,
                           request.b().inline_data().data(), 84));
  // The output without an initial C is poisoned: 0xFF bytes are NaN.
  for (int i = 320; i < 380; ++i) EXPECT_EQ(memory[i], '\xff') << i;
  // The reference stays inline and C-less.
  EXPECT_TRUE(placed->reference.a().has_inline_data());
  EXPECT_FALSE(placed->reference.has_c());
}

TEST(PlaceInRegionTest, KeepsInlineWhatIsNotPlacedAndTheInitialC) {
  const v1::MatmulRequest request = Random({.m = 3,
                                            .n = 4,
                                            .k = 2,
                                            .batch = 2,
                                            .beta = 0.5f,
                                            .out_dtype = DType::kFP32});
  std::vector<char> memory(1024);
  absl::StatusOr<RegionRequest> placed =
      PlaceInRegion(request, absl::MakeSpan(memory), "r", "s",
                    {.a = false, .b = true, .c = true});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_TRUE(placed->request.a().has_inline_data());
  EXPECT_EQ(placed->b_offset_bytes, 0u);
  EXPECT_THAT(placed->c_shape, ElementsAre(2, 3, 4));
  EXPECT_EQ(placed->c_dtype, DType::kFP32);
  // The initial C is copied in, to be read with beta and overwritten.
  EXPECT_EQ(0, std::memcmp(memory.data() + placed->c_offset_bytes,
                           request.c().inline_data().data(), 2 * 3 * 4 * 4));
  EXPECT_TRUE(placed->reference.has_c());
}

TEST(PlaceInRegionTest, RefusesASmallRegionAndRegionOperands) {
  const v1::MatmulRequest request = Random({.m = 50, .n = 60, .k = 70});
  std::vector<char> memory(1000);
  absl::StatusOr<RegionRequest> placed =
      PlaceInRegion(request, absl::MakeSpan(memory), "r", "s", {});
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(placed.status().message(), HasSubstr("it has 1000"));

  v1::MatmulRequest in_region = request;
  in_region.mutable_a()->mutable_region()->set_region_id("x");
  placed = PlaceInRegion(in_region, absl::MakeSpan(memory), "r", "s", {});
  EXPECT_EQ(placed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(placed.status().message(), HasSubstr("A must be inline"));
}

TEST(CheckRegionResponseTest, ReadsTheOutputFromTheRegion) {
  const v1::MatmulRequest request =
      Random({.m = 4, .n = 3, .k = 5, .out_dtype = DType::kFP32});
  std::vector<char> memory(1024);
  absl::StatusOr<RegionRequest> placed =
      PlaceInRegion(request, absl::MakeSpan(memory), "r", "s", {});
  ASSERT_TRUE(placed.ok());
  // Play the daemon: write the FP64 reference, rounded to FP32, in place.
  absl::StatusOr<std::vector<double>> expected = ReferenceResult(request);
  ASSERT_TRUE(expected.ok());
  for (size_t i = 0; i < expected->size(); ++i) {
    const float value = static_cast<float>((*expected)[i]);
    std::memcpy(memory.data() + placed->c_offset_bytes + 4 * i, &value, 4);
  }
  v1::MatmulResponse response;
  absl::StatusOr<double> error =
      CheckRegionResponse(*placed, response, absl::MakeSpan(memory));
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_LT(*error, 1e-6);

  // An in-place output must not also come back inline.
  *response.mutable_c() = request.a();
  EXPECT_EQ(CheckRegionResponse(*placed, response, absl::MakeSpan(memory))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // Untouched poison is NaN: the check fails rather than passing.
  absl::StatusOr<RegionRequest> untouched =
      PlaceInRegion(request, absl::MakeSpan(memory), "r", "s", {});
  error = CheckRegionResponse(*untouched, v1::MatmulResponse(),
                              absl::MakeSpan(memory));
  ASSERT_TRUE(error.ok());
  EXPECT_FALSE(*error < 1e-2);
}

TEST(MakeRandomRegionRequestTest, WritesRandomOperandsIntoTheRegion) {
  std::vector<char> memory(4096, 0);
  std::mt19937_64 rng(3);
  absl::StatusOr<RegionRequest> placed = MakeRandomRegionRequest(
      {.m = 8, .n = 8, .k = 8}, rng, absl::MakeSpan(memory), "r", "s");
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->request.a().region().region_id(), "r");
  EXPECT_EQ(0, std::memcmp(memory.data() + placed->a_offset_bytes,
                           placed->reference.a().inline_data().data(), 128));
}

}  // namespace
}  // namespace matmul
