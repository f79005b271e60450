// The load generator against a real in-process daemon (CPU backend), and
// its reports.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "client/bench/bench_report.h"
#include "client/bench/load_generator.h"
#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_daemon.h"

namespace matmul::bench {
namespace {

using ::testing::HasSubstr;

TEST(QuantileTest, NearestRank) {
  const std::vector<double> sorted = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(Quantile(sorted, 0.5), 5);
  EXPECT_EQ(Quantile(sorted, 0.9), 9);
  EXPECT_EQ(Quantile(sorted, 0.99), 10);
  EXPECT_EQ(Quantile(sorted, 0.0), 1);
  EXPECT_EQ(Quantile({}, 0.5), 0);
}

TEST(WindowsAgreeTest, ThroughputAndLatencyWithinTheBand) {
  std::vector<WindowStats> windows = {
      {.requests = 10, .requests_per_second = 100, .p50_latency = 0.010},
      {.requests = 10, .requests_per_second = 105, .p50_latency = 0.0105}};
  EXPECT_TRUE(WindowsAgree(windows, 0.10));
  windows[1].requests_per_second = 150;
  EXPECT_FALSE(WindowsAgree(windows, 0.10));
  windows[1].requests_per_second = 100;
  windows[1].p50_latency = 0.020;
  EXPECT_FALSE(WindowsAgree(windows, 0.10));
  windows[1] = {.requests = 0};
  EXPECT_FALSE(WindowsAgree(windows, 10.0));
}

class LoadGeneratorTest : public ::testing::Test {
 protected:
  absl::StatusOr<std::unique_ptr<LoadGenerator>> Generator(int channels) {
    std::mt19937_64 rng(3);
    absl::StatusOr<v1::MatmulRequest> request =
        MakeRandomRequest({.m = 16, .n = 32, .k = 24}, rng);
    if (!request.ok()) return request.status();
    return LoadGenerator::Create(daemon_.target(), channels, {*request},
                                 2.0 * 16 * 32 * 24);
  }
  TestDaemon daemon_;
};

TEST_F(LoadGeneratorTest, ClosedLoopMeasuresEveryAnswer) {
  auto generator = Generator(2);
  ASSERT_TRUE(generator.ok()) << generator.status();
  LoadOptions options{.concurrency = 4,
                      .window_requests = 50,
                      .stable_windows = 2,
                      .stability = 100.0,  // agree at once: 2 windows
                      .max_windows = 4,
                      .warmup = absl::Milliseconds(50)};
  int progress_calls = 0;
  absl::StatusOr<LevelResult> result =
      (*generator)
          ->RunLevel(options, [&](const std::vector<WindowStats>& windows) {
            progress_calls = static_cast<int>(windows.size());
          });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->stable);
  EXPECT_EQ(result->windows, 2);
  EXPECT_EQ(progress_calls, 2);
  EXPECT_GE(result->requests, 100);
  EXPECT_EQ(result->errors, 0);
  EXPECT_GT(result->requests_per_second, 0);
  EXPECT_NEAR(result->tflops,
              result->requests_per_second * 2.0 * 16 * 32 * 24 / 1e12, 1e-12);
  EXPECT_LE(result->latency_p50, result->latency_p90);
  EXPECT_LE(result->latency_p90, result->latency_p99);
  EXPECT_GT(result->server_total_p50, 0);
  EXPECT_GE(result->mean_batch_size, 1.0);
  EXPECT_LE(result->mean_batch_size, 4.0);
  // The daemon answered exactly what was sent (warm-up included).
  EXPECT_GE(MetricValue(daemon_.server().metrics().Scrape(),
                        "matmul_requests_total{code=\"ok\"}"),
            result->requests);
}

TEST_F(LoadGeneratorTest, StreamModeSendsEveryRequestOverOneStreamPerSlot) {
  auto generator = Generator(2);
  ASSERT_TRUE(generator.ok()) << generator.status();
  LoadOptions options{.concurrency = 3,
                      .window_requests = 40,
                      .stable_windows = 2,
                      .stability = 100.0,
                      .max_windows = 2,
                      .warmup = absl::Milliseconds(50),
                      .stream = true};
  absl::StatusOr<LevelResult> result = (*generator)->RunLevel(options, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(result->requests, 80);
  EXPECT_EQ(result->errors, 0);
  EXPECT_EQ(result->kernel, "openblas_sgemm");
  // A request the server rejects comes back in-band and counts as an error.
  v1::MatmulRequest bad;
  auto rejecting = LoadGenerator::Create(daemon_.target(), 1, {bad}, 1);
  ASSERT_TRUE(rejecting.ok());
  absl::StatusOr<LevelResult> rejected =
      (*rejecting)
          ->RunLevel({.concurrency = 2,
                      .window = absl::Milliseconds(100),
                      .warmup = absl::ZeroDuration(),
                      .stream = true},
                     {});
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(LoadGeneratorTest, OpenLoopHoldsTheRequestRate) {
  auto generator = Generator(1);
  ASSERT_TRUE(generator.ok()) << generator.status();
  LoadOptions options{.concurrency = 4,
                      .request_rate = 200,
                      .window = absl::Milliseconds(500),
                      .stable_windows = 1,
                      .stability = 100.0,
                      .max_windows = 1,
                      .warmup = absl::Milliseconds(100)};
  absl::StatusOr<LevelResult> result = (*generator)->RunLevel(options, {});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_NEAR(result->requests_per_second, 200, 60);
}

TEST_F(LoadGeneratorTest, BadOptionsAndNoDaemon) {
  auto generator = Generator(1);
  ASSERT_TRUE(generator.ok());
  EXPECT_EQ((*generator)->RunLevel({.concurrency = 0}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadGenerator::Create(daemon_.target(), 0, {}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::MatmulRequest any;
  EXPECT_EQ(LoadGenerator::Create("unix:/nonexistent/matmul.sock", 1, {any}, 1,
                                  absl::Milliseconds(300))
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(LoadGeneratorTest, RejectedRequestsFailTheLevelWithTheReason) {
  v1::MatmulRequest bad;  // no operands: INVALID_ARGUMENT every time
  auto generator = LoadGenerator::Create(daemon_.target(), 1, {bad}, 1);
  ASSERT_TRUE(generator.ok());
  absl::StatusOr<LevelResult> result =
      (*generator)
          ->RunLevel({.concurrency = 2,
                      .window = absl::Milliseconds(100),
                      .warmup = absl::ZeroDuration()},
                     {});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("code 3"));
}

BenchRun SampleRun(const std::string& label, double scale) {
  BenchRun run{.label = label,
               .shape = "16x4096x4096:NT",
               .mode = "ipc",
               .flops_per_request = 5.4e8};
  for (int c : {1, 4, 16}) {
    LevelResult l;
    l.concurrency = c;
    l.windows = 3;
    l.stable = true;
    l.requests = 1000 * c;
    l.requests_per_second = scale * 1000 * c;
    l.latency_p50 = 1e-4 * c;
    l.latency_p99 = 2e-4 * c;
    l.mean_batch_size = c / 2.0;
    run.levels.push_back(l);
  }
  return run;
}

// tools/plot_bench.py and tools/benchmarks_page.py read these names.
TEST(BenchReportTest, JsonHasEveryFieldAndCsvHasARowPerLevel) {
  const BenchRun run = SampleRun("batching on", 1.0);
  const nlohmann::json json = nlohmann::json::parse(ToJson(run));
  EXPECT_EQ(json.at("label"), "batching on");
  EXPECT_EQ(json.at("shape"), "16x4096x4096:NT");
  EXPECT_EQ(json.at("mode"), "ipc");
  EXPECT_DOUBLE_EQ(json.at("flops_per_request").get<double>(), 5.4e8);
  ASSERT_EQ(json.at("levels").size(), 3u);
  const nlohmann::json& last = json.at("levels")[2];
  EXPECT_EQ(last.at("concurrency"), 16);
  EXPECT_EQ(last.at("stable"), true);
  EXPECT_DOUBLE_EQ(last.at("latency_p99_s").get<double>(),
                   run.levels[2].latency_p99);
  EXPECT_DOUBLE_EQ(last.at("latency_p50_s").get<double>(),
                   run.levels[2].latency_p50);
  EXPECT_DOUBLE_EQ(last.at("requests_per_second").get<double>(), 16000);
  EXPECT_DOUBLE_EQ(json.at("levels")[1].at("mean_batch_size").get<double>(),
                   2.0);
  for (const char* field : {"tflops", "server_kernel_p50_s", "overhead_p99_s",
                            "kernel", "errors", "first_error"}) {
    EXPECT_TRUE(last.contains(field)) << field;
  }
  const std::string csv = ToCsv(run);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_THAT(csv, HasSubstr("latency_p99_s"));
  EXPECT_THAT(FormatTable(run), HasSubstr("batching on"));
}

}  // namespace
}  // namespace matmul::bench
