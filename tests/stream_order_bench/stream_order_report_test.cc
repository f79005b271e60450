// stream-order-bench's report without a GPU: the targets it holds each
// shape to, and the figures its JSON derives from the bursts' times.
#include "tests/stream_order_bench/stream_order_report.h"

#include "gtest/gtest.h"

namespace matmul::stream_order_bench {
namespace {

TEST(StreamOrderReportTest, TargetsAreTheIssues) {
  EXPECT_EQ(TargetRatio("5120x11008x2048"), 0.95);
  EXPECT_EQ(TargetRatio("5120x2048x11008"), 0.95);
  EXPECT_EQ(TargetRatio("5120x2048x2048"), 0.90);
  EXPECT_EQ(TargetRatio("5120x512x2048"), 0.80);
  EXPECT_EQ(TargetRatio("256x256x256"), std::nullopt);
}

ShapeResult ThreeRepetitions() {
  ShapeResult result;
  result.shape = "5120x2048x2048";
  result.flops = 1e12;  // 1 TFLOP per product
  result.products = 10;
  // 10 TFLOP per burst: 100, 50, 20 TFLOP/s for the daemon (median 50),
  // 125, 100, 25 for cuBLASLt (median 100).
  result.daemon_seconds = {0.1, 0.2, 0.5};
  result.cublaslt_seconds = {0.08, 0.1, 0.4};
  result.check_error = 1e-3;
  return result;
}

TEST(StreamOrderReportTest, JsonHasMediansRatioAndTarget) {
  const nlohmann::json json =
      ToJson({ThreeRepetitions()}, "Test GPU", /*repetitions=*/3);
  ASSERT_EQ(json["shapes"].size(), 1u);
  const nlohmann::json& shape = json["shapes"][0];
  EXPECT_EQ(json["device"], "Test GPU");
  EXPECT_DOUBLE_EQ(shape["daemon"]["median_tflops"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(shape["daemon"]["min_tflops"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(shape["daemon"]["max_tflops"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(shape["cublaslt"]["median_tflops"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(shape["ratio"].get<double>(), 0.5);
  // Each repetition's pair: 100/125, 50/100, 20/25.
  ASSERT_EQ(shape["pair_ratios"].size(), 3u);
  EXPECT_DOUBLE_EQ(shape["pair_ratios"][0].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(shape["pair_ratios"][1].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(shape["pair_ratios"][2].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(shape["target"].get<double>(), 0.90);
  EXPECT_EQ(shape["met"], false);
  EXPECT_EQ(shape["ok"], true);
}

TEST(StreamOrderReportTest, MetWhenTheRatioReachesTheTarget) {
  ShapeResult result = ThreeRepetitions();
  result.cublaslt_seconds = result.daemon_seconds;  // ratio 1
  const nlohmann::json json = ToJson({result}, "Test GPU", 3);
  EXPECT_DOUBLE_EQ(json["shapes"][0]["ratio"].get<double>(), 1.0);
  EXPECT_EQ(json["shapes"][0]["met"], true);
}

TEST(StreamOrderReportTest, AFailedShapeHasNoRatioAndSaysWhy) {
  ShapeResult result;
  result.shape = "5120x512x2048";
  result.flops = 1e10;
  result.products = 100;
  result.status = absl::InternalError("the check failed");
  const nlohmann::json json = ToJson({result}, "Test GPU", 5);
  const nlohmann::json& shape = json["shapes"][0];
  EXPECT_TRUE(shape["ratio"].is_null());
  EXPECT_TRUE(shape["met"].is_null());
  EXPECT_EQ(shape["ok"], false);
  EXPECT_NE(shape["error"].get<std::string>().find("the check failed"),
            std::string::npos);
}

}  // namespace
}  // namespace matmul::stream_order_bench
