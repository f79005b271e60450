// ProductAdmission::Submit, the path every transport's requests take
// (through the ProductSubmitter interface the reactors hold): what is
// answered before queueing, region access, the per-client quota, and a
// product that runs.
#include "server/api/matmul_service.h"

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/request_builder.h"
#include "common/gemm/reference_gemm.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backends/testing/gated_backend.h"
#include "server/execution/testing/test_lane.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

// What a submitted request was answered with, once it was.
struct Answer {
  v1::MatmulRequest request;
  v1::MatmulResponse response;
  absl::Notification done;
  absl::Status status;
};

class MatmulServiceTest : public ::testing::Test {
 protected:
  MatmulServiceTest()
      : rng_(std::random_device{}()),
        metrics_(*ServerMetrics::Create("", 16, {})),
        registry_({}) {
    auto backend = std::make_unique<GatedBackend>(/*open=*/false);
    backend_ = backend.get();
    lanes_.push_back(MakeTestLane(std::move(backend), *metrics_, 0));
    // Every product goes through the gated backend on the worker
    // (caller_thread_max_mflop 0).
    service_ = std::make_unique<MatmulServiceImpl>(
        lanes_, *metrics_, registry_, in_flight_,
        MatmulServiceOptions{.admission = {.max_in_flight_per_client = 1},
                             .max_concurrent_requests = 64,
                             .shm = {.prefix = "matmul-"}});
  }
  ~MatmulServiceTest() override {
    backend_->Open();
    lanes_.front().executor->Shutdown();
  }

  std::unique_ptr<Answer> RandomProduct(int64_t m, int64_t n, int64_t k) {
    auto answer = std::make_unique<Answer>();
    absl::StatusOr<v1::MatmulRequest> request =
        MakeRandomRequest({.m = m, .n = n, .k = k}, rng_);
    EXPECT_TRUE(request.ok()) << request.status();
    answer->request = *std::move(request);
    return answer;
  }

  // Submits through the interface the reactors use.
  void Submit(Answer& answer, CallControl control) {
    ProductSubmitter& submitter = service_->admission();
    submitter.Submit(std::move(control), &answer.request, &answer.response,
                     [&answer](absl::Status status) {
                       answer.status = std::move(status);
                       answer.done.Notify();
                     });
  }

  CallControl Client(const std::string& key) { return {.client_key = key}; }

  std::mt19937_64 rng_;
  std::unique_ptr<ServerMetrics> metrics_;
  RegionRegistry registry_;
  InFlightRequests in_flight_;
  std::vector<DeviceLane> lanes_;
  GatedBackend* backend_ = nullptr;
  std::unique_ptr<MatmulServiceImpl> service_;
};

TEST_F(MatmulServiceTest, AProductRunsAndIsAnswered) {
  backend_->Open();
  const int64_t m = 1 + rng_() % 20, n = 1 + rng_() % 20, k = 1 + rng_() % 20;
  std::unique_ptr<Answer> answer = RandomProduct(m, n, k);
  answer->request.set_request_id(17);
  Submit(*answer, Client("a"));
  ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(answer->status.ok()) << answer->status;
  EXPECT_EQ(answer->response.request_id(), 17u);

  GemmProblem problem;
  problem.m = m;
  problem.n = n;
  problem.k = k;
  problem.a = {.data = answer->request.a().inline_data().data(),
               .strides = {0, k, 1}};
  problem.b = {.data = answer->request.b().inline_data().data(),
               .strides = {0, n, 1}};
  const std::vector<double> expected = ReferenceGemm(problem);
  problem.c.data = const_cast<char*>(answer->response.c().inline_data().data());
  problem.c.strides = {0, n, 1};
  EXPECT_LT(RelativeError(ReadOutput(problem), expected), 1e-2);
}

TEST_F(MatmulServiceTest, RequestsThatCannotRunAreAnsweredBeforeSubmitReturns) {
  std::unique_ptr<Answer> late = RandomProduct(2, 2, 2);
  CallControl expired = Client("a");
  expired.deadline = absl::Now() - absl::Milliseconds(1);
  Submit(*late, std::move(expired));
  ASSERT_TRUE(late->done.HasBeenNotified());
  EXPECT_EQ(late->status.code(), absl::StatusCode::kDeadlineExceeded);

  std::unique_ptr<Answer> invalid = RandomProduct(2, 2, 2);  // A: K 2
  *invalid->request.mutable_b() =
      RandomProduct(2, 2, 3)->request.b();  // B: K 3 x N 2
  Submit(*invalid, Client("a"));
  ASSERT_TRUE(invalid->done.HasBeenNotified());
  EXPECT_EQ(invalid->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(invalid->status.message(), HasSubstr("inner dimensions"));
  // Neither took a place in the client's quota.
  backend_->Open();
  std::unique_ptr<Answer> fine = RandomProduct(2, 2, 2);
  Submit(*fine, Client("a"));
  ASSERT_TRUE(fine->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(fine->status.ok()) << fine->status;
}

TEST_F(MatmulServiceTest, RegionOperandsNeedALocalCallerThatOwnsTheSession) {
  const PeerCredentials owner{.pid = 11, .uid = 1000, .gid = 1000};
  const PeerCredentials stranger{.pid = 12, .uid = 1000, .gid = 1000};
  const std::string session = registry_.OpenSession("s", owner);
  auto region_request = [&] {
    std::unique_ptr<Answer> answer = RandomProduct(2, 2, 2);
    answer->request.set_session_id(session);
    answer->request.mutable_a()->mutable_region()->set_region_id("f00d");
    return answer;
  };
  std::unique_ptr<Answer> over_tcp = region_request();
  Submit(*over_tcp, Client("tcp"));  // no caller credentials
  EXPECT_EQ(over_tcp->status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(over_tcp->status.message(), HasSubstr("unix socket"));

  std::unique_ptr<Answer> not_owner = region_request();
  Submit(*not_owner, {.caller = stranger, .client_key = "x"});
  EXPECT_EQ(not_owner->status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(not_owner->status.message(), HasSubstr("another process"));

  std::unique_ptr<Answer> unknown_region = region_request();
  Submit(*unknown_region, {.caller = owner, .client_key = "o"});
  EXPECT_EQ(unknown_region->status.code(), absl::StatusCode::kNotFound);
}

TEST_F(MatmulServiceTest, EachClientHasItsOwnShareInFlight) {
  // The gate holds the first product in the backend.
  std::unique_ptr<Answer> first = RandomProduct(3, 3, 3);
  Submit(*first, Client("a"));
  EXPECT_FALSE(first->done.HasBeenNotified());

  std::unique_ptr<Answer> second = RandomProduct(3, 3, 3);
  Submit(*second, Client("a"));
  ASSERT_TRUE(second->done.HasBeenNotified());
  EXPECT_EQ(second->status.code(), absl::StatusCode::kResourceExhausted);

  std::unique_ptr<Answer> other = RandomProduct(3, 3, 3);
  Submit(*other, Client("b"));
  EXPECT_FALSE(other->done.HasBeenNotified());

  backend_->Open();
  ASSERT_TRUE(first->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(other->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(first->status.ok()) << first->status;
  EXPECT_TRUE(other->status.ok()) << other->status;
  // The answer gave the place back.
  std::unique_ptr<Answer> again = RandomProduct(3, 3, 3);
  Submit(*again, Client("a"));
  ASSERT_TRUE(again->done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(again->status.ok()) << again->status;
}

}  // namespace
}  // namespace matmul
