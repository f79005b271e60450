// Dynamic batching through a real daemon (CPU backend) and real clients:
// batches form under concurrency, every request of a batch gets its own
// correct result, the delay bound holds, and cancelled or expired requests
// never run.
#include <future>
#include <random>
#include <string>
#include <vector>

#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

ServerOptions BatchingOptions(int max_batch_size, absl::Duration delay) {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.executor.worker_threads = 1;
  options.executor.batching.max_batch_size = max_batch_size;
  options.executor.batching.max_queue_delay = delay;
  return options;
}

// Occupies the daemon's only worker with a product that takes a while on
// one core, so that what arrives meanwhile queues.
// A request sent and its answer to come.
struct Sent {
  v1::MatmulRequest request;
  std::future<absl::StatusOr<v1::MatmulResponse>> response;
};

std::future<absl::StatusOr<v1::MatmulResponse>> OccupyTheWorker(
    TestDaemon& daemon, std::mt19937_64& rng) {
  auto slow = MakeRandomRequest({.m = 2500, .n = 2500, .k = 2500}, rng);
  EXPECT_TRUE(slow.ok());
  auto running = daemon.client().MatmulFuture(*slow, absl::Seconds(120));
  EXPECT_TRUE(WaitFor([&] { return daemon.server().running() == 1; }));
  return running;
}

TEST(BatchingTest, RequestsQueuedTogetherShareALaunchAndGetTheirOwnResults) {
  TestDaemon daemon(BatchingOptions(8, absl::ZeroDuration()));
  std::mt19937_64 rng(5);
  auto slow = OccupyTheWorker(daemon, rng);
  // 20 requests of one batch key (different data, some transposed the same
  // way), plus 4 of another key that must not join them.
  std::vector<Sent> sent;
  for (int i = 0; i < 24; ++i) {
    ProblemSpec spec{.m = 33, .n = 40, .k = 57, .transpose_b = true};
    if (i % 6 == 5)
      spec = {.m = 16, .n = 9, .k = 70, .out_dtype = DType::kFP32};
    auto request = MakeRandomRequest(spec, rng);
    ASSERT_TRUE(request.ok());
    request->set_request_id(i);
    auto response = daemon.client().MatmulFuture(*request, absl::Seconds(60));
    sent.push_back({*std::move(request), std::move(response)});
  }
  ASSERT_TRUE(WaitFor([&] { return daemon.server().queue_depth() == 24; }));
  ASSERT_TRUE(slow.get().ok());
  int largest = 0;
  for (Sent& s : sent) {
    absl::StatusOr<v1::MatmulResponse> response = s.response.get();
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->request_id(), s.request.request_id());
    absl::StatusOr<double> error = CheckResponse(s.request, *response);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, DefaultTolerance(*ResolvedOutDType(s.request)))
        << "request " << s.request.request_id();
    EXPECT_LE(response->batch_size(), 8u);
    largest = std::max(largest, static_cast<int>(response->batch_size()));
  }
  // 20 of one key queued while the worker was busy: batches of 8, 8, 4; the
  // other key's 4 run together.
  EXPECT_EQ(largest, 8);
  // A launch's metrics are recorded just after its answers
  // (server/execution/matmul_runner.cc): the last launch's may still be on the
  // way.
  EXPECT_TRUE(WaitFor([&] {
    return MetricValue(
               daemon.server().metrics().Scrape(),
               "matmul_launch_duration_seconds_count{device=\"cpu\"}") ==
           1 + 3 + 1;
  }));
  const std::string scrape = daemon.server().metrics().Scrape();
  EXPECT_EQ(MetricValue(scrape, "matmul_batch_size_count{device=\"cpu\"}"),
            1 + 3 + 1);
  EXPECT_EQ(MetricValue(scrape, "matmul_batch_size_sum{device=\"cpu\"}"), 25);
  // Every launch's wall time and answering time, once each.
  EXPECT_EQ(MetricValue(scrape,
                        "matmul_launch_duration_seconds_count{device=\"cpu\"}"),
            1 + 3 + 1);
  EXPECT_EQ(MetricValue(scrape,
                        "matmul_answer_duration_seconds_count{device=\"cpu\"}"),
            1 + 3 + 1);
  EXPECT_GT(
      MetricValue(scrape, "matmul_launch_duration_seconds_sum{device=\"cpu\"}"),
      0);
  EXPECT_EQ(MetricValue(scrape, "matmul_queue_depth"), 0);
}

TEST(BatchingTest, ALoneRequestWaitsTheDelayAndNoLonger) {
  const absl::Duration delay = absl::Milliseconds(80);
  TestDaemon daemon(BatchingOptions(64, delay));
  std::mt19937_64 rng(6);
  auto request = MakeRandomRequest({.m = 8, .n = 8, .k = 8}, rng);
  ASSERT_TRUE(request.ok());
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::MatmulResponse> response =
        daemon.client().Matmul(*request, absl::Seconds(30));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->batch_size(), 1u);
    EXPECT_GE(response->timing().queue_seconds(), absl::ToDoubleSeconds(delay));
    // Generous slack for a loaded 2-core machine; the point is "bounded".
    EXPECT_LT(response->timing().queue_seconds(),
              absl::ToDoubleSeconds(delay) + 1.0);
  }
}

TEST(BatchingTest, WithoutADelayALoneRequestDoesNotWait) {
  TestDaemon daemon(BatchingOptions(64, absl::ZeroDuration()));
  std::mt19937_64 rng(7);
  auto request = MakeRandomRequest({.m = 8, .n = 8, .k = 8}, rng);
  ASSERT_TRUE(request.ok());
  absl::StatusOr<v1::MatmulResponse> response =
      daemon.client().Matmul(*request, absl::Seconds(30));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->batch_size(), 1u);
  EXPECT_LT(response->timing().queue_seconds(), 0.05);
}

// A CPU backend that wants every product to run alone, as the CUDA backend
// does for products that fill the GPU.
class RunsAloneBackend final : public GemmBackend {
 public:
  RunsAloneBackend() : cpu_(CpuBackend::Create(1)) {}
  std::string name() const override { return cpu_->name(); }
  std::vector<DeviceInfo> devices() const override { return cpu_->devices(); }
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override {
    return cpu_->RunHost(problem);
  }
  int MaxUsefulBatch(const GemmProblem& /*problem*/) const override {
    return 1;
  }

 private:
  std::unique_ptr<GemmBackend> cpu_;
};

TEST(BatchingTest, ProductsTheBackendRunsAloneAreNeverBatched) {
  TestDaemon daemon(BatchingOptions(8, absl::ZeroDuration()), 1,
                    [] { return std::make_unique<RunsAloneBackend>(); });
  std::mt19937_64 rng(9);
  auto slow = OccupyTheWorker(daemon, rng);
  std::vector<Sent> sent;
  for (int i = 0; i < 6; ++i) {
    auto request = MakeRandomRequest({.m = 20, .n = 30, .k = 40}, rng);
    ASSERT_TRUE(request.ok());
    auto response = daemon.client().MatmulFuture(*request, absl::Seconds(60));
    sent.push_back({*std::move(request), std::move(response)});
  }
  // All six queue behind the busy worker, as those that do batch would.
  ASSERT_TRUE(WaitFor([&] { return daemon.server().queue_depth() == 6; }));
  ASSERT_TRUE(slow.get().ok());
  for (Sent& s : sent) {
    absl::StatusOr<v1::MatmulResponse> response = s.response.get();
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->batch_size(), 1u);
    absl::StatusOr<double> error = CheckResponse(s.request, *response);
    ASSERT_TRUE(error.ok()) << error.status();
    EXPECT_LT(*error, 1e-2);
  }
}

TEST(BatchingTest, ACancelledCallIsDroppedWithoutRunning) {
  TestDaemon daemon(BatchingOptions(8, absl::ZeroDuration()));
  std::mt19937_64 rng(8);
  auto slow = OccupyTheWorker(daemon, rng);
  auto small = MakeRandomRequest({.m = 8, .n = 8, .k = 8}, rng);
  ASSERT_TRUE(small.ok());
  grpc::ClientContext context;
  v1::MatmulResponse response;
  std::promise<grpc::Status> done;
  daemon.client().stub().async()->Matmul(
      &context, &*small, &response,
      [&done](grpc::Status status) { done.set_value(status); });
  ASSERT_TRUE(WaitFor([&] { return daemon.server().queue_depth() == 1; }));
  context.TryCancel();
  EXPECT_EQ(done.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(slow.get().ok());
  auto metric = [&](const std::string& series) {
    return MetricValue(daemon.server().metrics().Scrape(), series);
  };
  EXPECT_TRUE(WaitFor([&] {
    return metric("matmul_requests_total{code=\"cancelled\"}") == 1;
  }));
  // Only the slow product ran.
  EXPECT_EQ(metric("matmul_requests_total{code=\"ok\"}"), 1);
  EXPECT_EQ(metric("matmul_batch_size_count{device=\"cpu\"}"), 1);
}

// Two lanes (CPU backends standing in for two GPUs): a request with inline
// operands goes to the least loaded lane, so it does not wait behind a
// slow product on the other.
TEST(LanesTest, InlineRequestsGoToTheLeastLoadedLane) {
  TestDaemon daemon(BatchingOptions(8, absl::ZeroDuration()), /*cpu_lanes=*/2);
  ASSERT_EQ(daemon.server().lanes().size(), 2u);
  std::mt19937_64 rng(9);
  auto slow = OccupyTheWorker(daemon, rng);
  auto small = MakeRandomRequest({.m = 8, .n = 8, .k = 8}, rng);
  ASSERT_TRUE(small.ok());
  absl::StatusOr<v1::MatmulResponse> response =
      daemon.client().Matmul(*small, absl::Seconds(30));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(slow.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the small product waited for the slow one";
  EXPECT_EQ(daemon.server().lanes()[0].executor->running(), 1);
  EXPECT_EQ(response->device_index(), 1);
  absl::StatusOr<v1::MatmulResponse> slow_response = slow.get();
  ASSERT_TRUE(slow_response.ok()) << slow_response.status();
  EXPECT_EQ(slow_response->device_index(), 0);
  absl::StatusOr<v1::GetServerInfoResponse> info =
      daemon.client().GetServerInfo(absl::Seconds(10));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->devices_size(), 2);
}

TEST(BatchingTest, BadOptionsAreRefused) {
  std::unique_ptr<GemmBackend> backend = CpuBackend::Create(1);
  ServerOptions options = BatchingOptions(0, absl::ZeroDuration());
  options.listen = {"unix:" + FreshSocketPath()};
  options.metrics_listen = "";
  absl::StatusOr<std::unique_ptr<MatmulServer>> server =
      MatmulServer::Create(options, std::move(backend));
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()),
              ::testing::HasSubstr("max_batch_size"));
}

}  // namespace
}  // namespace matmul
