// Requests whose deadline has passed are never run (issue 18, finding 8):
// neither those that arrive expired (gRPC sends an expired deadline as
// "1n", which the server reads back as 1 ms away) nor those whose deadline
// passes while they queue. A backend that counts its products shows what
// ran.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <future>
#include <random>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_daemon.h"

namespace matmul {
namespace {

// The CPU backend, counting the products it runs; the first product waits
// for `gate` (when given) before it runs, to hold the only worker busy.
class CountingBackend final : public GemmBackend {
 public:
  CountingBackend(std::atomic<int>* runs, absl::Notification* gate)
      : cpu_(CpuBackend::Create(1)), runs_(runs), gate_(gate) {}
  std::string name() const override { return cpu_->name(); }
  std::vector<DeviceInfo> devices() const override { return cpu_->devices(); }
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override {
    if (runs_->fetch_add(1) == 0 && gate_ != nullptr) {
      gate_->WaitForNotification();
    }
    return cpu_->RunHost(problem);
  }

 private:
  std::unique_ptr<GemmBackend> cpu_;
  std::atomic<int>* const runs_;
  absl::Notification* const gate_;
};

ServerOptions OneWorker() {
  ServerOptions options = TestDaemon::DefaultOptions();
  options.executor.worker_threads = 1;
  return options;
}

// Sends `request` with the raw stub (the client library refuses expired
// deadlines itself) and an absolute deadline.
std::future<grpc::Status> SendWithDeadline(
    TestDaemon& daemon, const v1::MatmulRequest& request,
    std::chrono::system_clock::time_point deadline) {
  struct Call {
    grpc::ClientContext context;
    v1::MatmulResponse response;
    std::promise<grpc::Status> done;
  };
  auto call = std::make_shared<Call>();
  call->context.set_deadline(deadline);
  std::future<grpc::Status> done = call->done.get_future();
  daemon.client().stub().async()->Matmul(
      &call->context, &request, &call->response,
      [call](grpc::Status status) { call->done.set_value(status); });
  return done;
}

// One attempt of the test below on a fresh daemon: bursts of calls whose
// deadline has passed or is a nanosecond or microsecond away, until some
// have reached the server. True when none of those ran; the client sees
// DEADLINE_EXCEEDED for every one that did not run.
bool TinyDeadlinesNeverRun(int attempt) {
  std::atomic<int> runs{0};
  TestDaemon daemon(OneWorker(), 1, [&runs] {
    return std::make_unique<CountingBackend>(&runs, nullptr);
  });
  EXPECT_TRUE(daemon.client().WaitForConnected(absl::Seconds(10)).ok());
  std::mt19937_64 rng(18 + attempt);
  auto request = MakeRandomRequest({.m = 4, .n = 4, .k = 4}, rng);
  EXPECT_TRUE(request.ok());
  if (!request.ok()) return false;
  // Already passed, exactly now, and a nanosecond or microsecond away: on
  // the wire all of these are "1n" or "1m".
  const std::chrono::nanoseconds offsets[] = {
      std::chrono::seconds(-1), std::chrono::nanoseconds(0),
      std::chrono::nanoseconds(1), std::chrono::microseconds(1)};
  auto reached = [&] {
    return MetricValue(daemon.server().metrics().Scrape(),
                       "matmul_requests_total{code=\"deadline_exceeded\"}");
  };
  // The client drops some of them before they go out (its own timer wins
  // the race); rounds go on until some have reached the server, or the
  // test would prove nothing.
  for (int round = 0; round < 20 && reached() <= 0; ++round) {
    std::vector<std::future<grpc::Status>> calls;
    for (int i = 0; i < 200; ++i) {
      calls.push_back(SendWithDeadline(
          daemon, *request, std::chrono::system_clock::now() + offsets[i % 4]));
    }
    for (std::future<grpc::Status>& call : calls) {
      const grpc::StatusCode code = call.get().error_code();
      // OK only where the server ran it in time, which fails this attempt
      // below through the ok counter.
      EXPECT_TRUE(code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                  code == grpc::StatusCode::OK)
          << code;
    }
    // Let the server finish with what reached it.
    EXPECT_TRUE(WaitFor([&] {
      return daemon.server().queue_depth() == 0 &&
             daemon.server().running() == 0;
    }));
    absl::SleepFor(absl::Milliseconds(100));
  }
  const std::string scrape = daemon.server().metrics().Scrape();
  EXPECT_GT(reached(), 0) << scrape;
  const double ok = MetricValue(scrape, "matmul_requests_total{code=\"ok\"}");
  if (runs.load() != 0 || ok > 0) {
    std::printf("attempt %d: %d launches ran %g requests\n", attempt,
                runs.load(), ok);
    return false;
  }
  // A request with time to spare does run (the counter counts).
  auto fine = daemon.client().Matmul(*request, absl::Seconds(10));
  EXPECT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(runs.load(), 1);
  return true;
}

// The daemon answers a request that arrives with its deadline passed, or
// too close to answer in time, without running it. Now and then gRPC hands
// a burst of such calls to the server with a few milliseconds left (the
// grpc-timeout header is computed from the client's idea of now), and those
// run; a daemon that ignored deadlines would run some in every attempt.
TEST(DeadlineTest, ExpiredAndTinyDeadlinesAreNeverRun) {
  bool held = false;
  for (int attempt = 0; attempt < 3 && !held; ++attempt) {
    held = TinyDeadlinesNeverRun(attempt);
  }
  EXPECT_TRUE(held) << "expired requests ran in each of 3 attempts";
}

TEST(DeadlineTest, ARequestWhoseDeadlinePassesInTheQueueIsNotRun) {
  std::atomic<int> runs{0};
  absl::Notification gate;
  TestDaemon daemon(OneWorker(), 1, [&runs, &gate] {
    return std::make_unique<CountingBackend>(&runs, &gate);
  });
  std::mt19937_64 rng(19);
  auto request = MakeRandomRequest({.m = 8, .n = 8, .k = 8}, rng);
  ASSERT_TRUE(request.ok());
  // The first product holds the only worker until the gate opens...
  auto slow = daemon.client().MatmulFuture(*request, absl::Seconds(60));
  ASSERT_TRUE(WaitFor([&] { return daemon.server().running() == 1; }));
  // ...a second one queues behind it with a short deadline...
  std::future<grpc::Status> queued = SendWithDeadline(
      daemon, *request,
      std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  ASSERT_TRUE(WaitFor([&] { return daemon.server().queue_depth() == 1; }));
  // ...which passes (the client sees it) before the worker is free.
  EXPECT_EQ(queued.get().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  gate.Notify();
  ASSERT_TRUE(slow.get().ok());
  // Answered without running: as past its deadline, or, where the request
  // reached the daemon late (a loaded machine) and so got a later deadline
  // there than the client's, as cancelled by the client's going away.
  auto answered = [](const std::string& scrape, const std::string& code) {
    return std::max(0.0, MetricValue(scrape, "matmul_requests_total{code=\"" +
                                                 code + "\"}"));
  };
  ASSERT_TRUE(WaitFor([&] {
    const std::string scrape = daemon.server().metrics().Scrape();
    return answered(scrape, "deadline_exceeded") +
               answered(scrape, "cancelled") ==
           1;
  }));
  EXPECT_EQ(runs.load(), 1);  // the slow one alone
}

}  // namespace
}  // namespace matmul
