#include "server/execution/matmul_runner.h"

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/request_builder.h"
#include "common/gemm/reference_gemm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/device_lost.h"
#include "server/product/bound_operands.h"
#include "server/product/request_validation.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

// alpha that makes FakeBackend fail any launch the product is in.
constexpr float kPoisonAlpha = 7.0f;

// Computes with the CPU backend and counts launches; fails a launch that
// holds a poisoned product with `failure`.
class FakeBackend final : public GemmBackend {
 public:
  std::string name() const override { return "fake"; }
  std::vector<DeviceInfo> devices() const override { return {}; }
  absl::StatusOr<GemmRunInfo> RunHost(const GemmProblem& problem) override {
    return cpu_->RunHost(problem);
  }
  absl::StatusOr<GemmRunInfo> RunBatch(
      absl::Span<const GemmProblem* const> problems, bool on_device) override {
    launches.push_back(static_cast<int>(problems.size()));
    for (const GemmProblem* problem : problems) {
      if (problem->alpha == kPoisonAlpha) return failure;
    }
    absl::StatusOr<GemmRunInfo> run = cpu_->RunBatch(problems, on_device);
    if (run.ok()) run->kernel = "fake-kernel";
    return run;
  }

  // With `defer`, a launch completes only when the test calls
  // CompleteDeferred, as a GPU backend's completion thread would.
  void StartBatch(absl::Span<const GemmProblem* const> problems, bool on_device,
                  LaunchDone done) override {
    if (!defer) {
      GemmBackend::StartBatch(problems, on_device, std::move(done));
      return;
    }
    absl::MutexLock lock(&mu_);
    deferred_.push_back(
        {{problems.begin(), problems.end()}, on_device, std::move(done)});
  }
  // Runs the deferred launches and their completions on this thread.
  void CompleteDeferred() {
    std::vector<Deferred> deferred;
    {
      absl::MutexLock lock(&mu_);
      deferred.swap(deferred_);
    }
    for (Deferred& launch : deferred) {
      std::move(launch.done)(RunBatch(launch.problems, launch.on_device));
    }
  }

  std::vector<int> launches;  // products per launch
  absl::Status failure = absl::InternalError("poisoned");
  bool defer = false;

 private:
  struct Deferred {
    std::vector<const GemmProblem*> problems;
    bool on_device;
    LaunchDone done;
  };
  std::unique_ptr<GemmBackend> cpu_ = CpuBackend::Create(1);
  absl::Mutex mu_;
  std::vector<Deferred> deferred_ ABSL_GUARDED_BY(mu_);
};

// A product's request, its answer, and what its call was answered with.
struct Call {
  v1::MatmulRequest request;
  v1::MatmulResponse response;
  std::optional<absl::Status> status;
};

class MatmulRunnerTest : public ::testing::Test {
 protected:
  MatmulRunnerTest()
      : rng_(std::random_device{}()),
        registry_({}),
        metrics_(*ServerMetrics::Create("", 16, {})),
        m_(1 + rng_() % 9),
        n_(1 + rng_() % 9),
        k_(1 + rng_() % 9) {}

  // A random m x n x k product (the same shape for every call of a test,
  // so that they may share a launch).
  std::unique_ptr<Call> NewCall(uint64_t request_id) {
    auto call = std::make_unique<Call>();
    absl::StatusOr<v1::MatmulRequest> request =
        MakeRandomRequest({.m = m_, .n = n_, .k = k_}, rng_);
    EXPECT_TRUE(request.ok()) << request.status();
    call->request = *std::move(request);
    call->request.set_request_id(request_id);
    return call;
  }

  std::unique_ptr<PendingProduct> Pending(Call& call,
                                          CallControl control = {}) {
    auto product = std::make_unique<PendingProduct>();
    absl::StatusOr<MatmulPlan> plan = ValidateRequest(call.request, {});
    EXPECT_TRUE(plan.ok()) << plan.status();
    product->plan = *std::move(plan);
    absl::StatusOr<std::unique_ptr<BoundOperands>> operands =
        BoundOperands::Bind(product->plan, call.request, registry_, false);
    EXPECT_TRUE(operands.ok()) << operands.status();
    product->operands = *std::move(operands);
    product->request = &call.request;
    product->response = &call.response;
    product->control = std::move(control);
    product->accepted = absl::Now();
    product->finish = [&call](absl::Status status) {
      EXPECT_FALSE(call.status.has_value()) << "answered twice";
      call.status = std::move(status);
    };
    return product;
  }

  // Runs a batch of three calls whose second is poisoned (kPoisonAlpha);
  // returns the calls.
  std::vector<std::unique_ptr<Call>> RunPoisonedBatch(MatmulRunner& runner) {
    std::vector<std::unique_ptr<Call>> calls;
    std::vector<std::unique_ptr<PendingProduct>> batch;
    for (uint64_t id = 1; id <= 3; ++id) {
      calls.push_back(NewCall(id));
      if (id == 2) calls.back()->request.set_alpha(kPoisonAlpha);
      batch.push_back(Pending(*calls.back()));
    }
    runner.RunBatch(std::move(batch));
    return calls;
  }

  // The relative error of a call's answer against the FP64 reference.
  double Error(const Call& call) {
    absl::StatusOr<MatmulPlan> plan = ValidateRequest(call.request, {});
    GemmProblem problem = plan->problem;
    problem.a.data = call.request.a().inline_data().data();
    problem.b.data = call.request.b().inline_data().data();
    std::vector<double> expected = ReferenceGemm(problem);
    problem.c.data = const_cast<char*>(call.response.c().inline_data().data());
    return RelativeError(ReadOutput(problem), expected);
  }

  std::mt19937_64 rng_;
  RegionRegistry registry_;
  std::unique_ptr<ServerMetrics> metrics_;
  FakeBackend backend_;
  const int64_t m_, n_, k_;
};

TEST_F(MatmulRunnerTest, RunsTheBatchAsOneLaunchAndAnswersEach) {
  MatmulRunner runner(backend_, *metrics_, /*device_index=*/3);
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::unique_ptr<PendingProduct>> batch;
  for (uint64_t id = 1; id <= 3; ++id) {
    calls.push_back(NewCall(id));
    batch.push_back(Pending(*calls.back()));
  }
  runner.RunBatch(std::move(batch));
  EXPECT_THAT(backend_.launches, ::testing::ElementsAre(3));
  for (uint64_t id = 1; id <= 3; ++id) {
    const Call& call = *calls[id - 1];
    ASSERT_TRUE(call.status.has_value());
    ASSERT_TRUE(call.status->ok()) << *call.status;
    EXPECT_EQ(call.response.request_id(), id);
    EXPECT_EQ(call.response.backend(), "fake");
    EXPECT_EQ(call.response.kernel(), "fake-kernel");
    EXPECT_EQ(call.response.device_index(), 3);
    EXPECT_EQ(call.response.batch_size(), 3u);
    EXPECT_THAT(call.response.c().shape(), ::testing::ElementsAre(m_, n_));
    EXPECT_LT(Error(call), 1e-2);
  }
}

TEST_F(MatmulRunnerTest, ALaunchCompletedOnAnotherThreadIsAnsweredThen) {
  backend_.defer = true;
  auto runner = std::make_unique<MatmulRunner>(backend_, *metrics_, 0);
  std::unique_ptr<Call> call = NewCall(1);
  std::vector<std::unique_ptr<PendingProduct>> batch;
  batch.push_back(Pending(*call));
  // The launch's hold goes back once it is complete, before its answer.
  bool given_back = false;
  runner->RunBatch(std::move(batch), LaunchHold([&] {
                     EXPECT_FALSE(call->status.has_value());
                     given_back = true;
                   }));
  EXPECT_FALSE(call->status.has_value()) << "answered before it completed";
  EXPECT_FALSE(given_back) << "the hold went back before the launch ended";
  std::thread completer([this] { backend_.CompleteDeferred(); });
  completer.join();
  EXPECT_TRUE(given_back);
  ASSERT_TRUE(call->status.has_value());
  ASSERT_TRUE(call->status->ok()) << *call->status;
  EXPECT_EQ(call->response.kernel(), "fake-kernel");
  EXPECT_LT(Error(*call), 1e-2);

  // The runner's destructor waits for a launch still completing.
  std::unique_ptr<Call> last = NewCall(2);
  batch.clear();
  batch.push_back(Pending(*last));
  runner->RunBatch(std::move(batch));
  completer = std::thread([this] {
    absl::SleepFor(absl::Milliseconds(50));
    backend_.CompleteDeferred();
  });
  runner.reset();
  EXPECT_TRUE(last->status.has_value()) << "the runner went first";
  completer.join();
  ASSERT_TRUE(last->status.has_value());
  EXPECT_TRUE(last->status->ok()) << *last->status;
}

TEST_F(MatmulRunnerTest, StaleProductsAreAnsweredWithoutRunning) {
  MatmulRunner runner(backend_, *metrics_, 0);
  std::unique_ptr<Call> expired = NewCall(1);
  std::unique_ptr<Call> cancelled = NewCall(2);
  std::unique_ptr<Call> live = NewCall(3);
  std::vector<std::unique_ptr<PendingProduct>> batch;
  batch.push_back(
      Pending(*expired, {.deadline = absl::Now() - absl::Seconds(1),
                         .cancelled = [] { return true; }}));  // deadline wins
  batch.push_back(Pending(*cancelled, {.cancelled = [] { return true; }}));
  batch.push_back(Pending(*live));
  runner.RunBatch(std::move(batch));
  EXPECT_EQ(expired->status->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cancelled->status->code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(live->status->ok());
  EXPECT_THAT(backend_.launches, ::testing::ElementsAre(1));
  EXPECT_FALSE(expired->response.has_c());
}

TEST_F(MatmulRunnerTest, AFailedLaunchIsRetriedOneByOne) {
  MatmulRunner runner(backend_, *metrics_, 0);
  std::vector<std::unique_ptr<Call>> calls = RunPoisonedBatch(runner);
  EXPECT_THAT(backend_.launches, ::testing::ElementsAre(3, 1, 1, 1));
  EXPECT_TRUE(calls[0]->status->ok());
  EXPECT_EQ(calls[1]->status->code(), absl::StatusCode::kInternal);
  EXPECT_EQ(calls[1]->status->message(), "fake backend: poisoned");
  EXPECT_TRUE(calls[2]->status->ok());
  EXPECT_EQ(calls[2]->response.batch_size(), 1u);
  EXPECT_LT(Error(*calls[2]), 1e-2);
}

// A launch of several that fails once queued, on the backend's thread,
// failed as the device does: each product is answered so, none retried
// there (that thread must not block on a launch).
TEST_F(MatmulRunnerTest, ALaunchOfSeveralFailedOnAnotherThreadAnswersEach) {
  backend_.defer = true;
  MatmulRunner runner(backend_, *metrics_, 0);
  std::vector<std::unique_ptr<Call>> calls = RunPoisonedBatch(runner);
  std::thread completer([this] { backend_.CompleteDeferred(); });
  completer.join();
  EXPECT_THAT(backend_.launches, ::testing::ElementsAre(3));
  for (const std::unique_ptr<Call>& call : calls) {
    ASSERT_TRUE(call->status.has_value());
    EXPECT_EQ(call->status->code(), absl::StatusCode::kInternal);
    EXPECT_EQ(call->status->message(), "fake backend: poisoned");
  }
}

TEST_F(MatmulRunnerTest, ALostDeviceAnswersUnavailableFromThenOn) {
  int lost_calls = 0;
  MatmulRunner runner(backend_, *metrics_, 0, [&](const absl::Status& status) {
    ++lost_calls;
    EXPECT_TRUE(IsDeviceLost(status));
  });
  backend_.failure = DeviceLostError("context gone");
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::unique_ptr<PendingProduct>> batch;
  for (uint64_t id = 1; id <= 2; ++id) {
    calls.push_back(NewCall(id));
    calls.back()->request.set_alpha(kPoisonAlpha);
    batch.push_back(Pending(*calls.back()));
  }
  runner.RunBatch(std::move(batch));
  // No one-by-one retry on a lost device.
  EXPECT_THAT(backend_.launches, ::testing::ElementsAre(2));
  for (const auto& call : calls) {
    EXPECT_EQ(call->status->code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(call->status->message(), HasSubstr("GPU was lost"));
  }
  EXPECT_EQ(lost_calls, 1);

  // A healthy product later is not run at all.
  std::unique_ptr<Call> later = NewCall(3);
  batch.clear();
  batch.push_back(Pending(*later));
  runner.RunBatch(std::move(batch));
  EXPECT_EQ(later->status->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(backend_.launches.size(), 1u);
  EXPECT_EQ(lost_calls, 1);
}

}  // namespace
}  // namespace matmul
