// The daemon's metrics end to end: a real daemon serves real requests and
// its scrape shows the parts it wires in (server/metrics/metrics_test.cc covers
// ServerMetrics on its own).
#include <random>
#include <string>

#include "absl/time/time.h"
#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

// The daemon wires its parts in: a CPU device, the serving flag, the
// regions, the requests' shapes and codes.
TEST(DaemonMetricsTest, ADaemonExportsItsDeviceRequestsAndRegions) {
  TestDaemon daemon;
  std::mt19937_64 rng(std::random_device{}());
  absl::StatusOr<v1::MatmulRequest> request =
      MakeRandomRequest({.m = 24, .n = 40, .k = 56}, rng);
  ASSERT_TRUE(request.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(daemon.client().Matmul(*request, absl::Seconds(30)).ok());
  }
  v1::MatmulRequest bad = *request;
  bad.mutable_a()->clear_shape();
  EXPECT_FALSE(daemon.client().Matmul(bad, absl::Seconds(30)).ok());

  // A launch's metrics are recorded just after its answers
  // (server/execution/matmul_runner.cc): the last product's may still be on the
  // way.
  const std::string flops =
      "matmul_flops_total{device=\"cpu\",shape=\"24x40x56:NN\"}";
  EXPECT_TRUE(WaitFor([&] {
    return MetricValue(daemon.server().metrics().Scrape(), flops) ==
           3 * 2.0 * 24 * 40 * 56;
  }));
  const std::string scrape = daemon.server().metrics().Scrape();
  EXPECT_EQ(MetricValue(scrape, "matmul_serving"), 1);
  EXPECT_EQ(MetricValue(scrape, "matmul_device_info{device=\"cpu\"}"), 1);
  EXPECT_EQ(MetricValue(scrape,
                        "matmul_requests_total{code=\"ok\",shape=\"24x40x56:"
                        "NN\"}"),
            3);
  EXPECT_EQ(MetricValue(scrape,
                        "matmul_requests_total{code=\"invalid_argument\","
                        "shape=\"invalid\"}"),
            1);
  EXPECT_EQ(MetricValue(scrape, flops), 3 * 2.0 * 24 * 40 * 56);
  EXPECT_GT(MetricValue(scrape,
                        "matmul_kernel_seconds_total{device=\"cpu\",shape="
                        "\"24x40x56:NN\"}"),
            0);
  EXPECT_GT(
      MetricValue(scrape, "matmul_device_memory_total_bytes{device=\"cpu\"}"),
      0);
  EXPECT_EQ(MetricValue(scrape, "matmul_queue_capacity"),
            TestDaemon::DefaultOptions().executor.batching.max_queue_size);
  EXPECT_EQ(MetricValue(scrape, "matmul_sessions"), 0);
  EXPECT_EQ(MetricValue(scrape, "matmul_regions"), 0);
  EXPECT_THAT(scrape, HasSubstr("matmul_build_info{cublas=\""));

  daemon.server().Shutdown(absl::Seconds(1));
  EXPECT_EQ(MetricValue(daemon.server().metrics().Scrape(), "matmul_serving"),
            0);
}

}  // namespace
}  // namespace matmul
