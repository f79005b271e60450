// RingReactor without gRPC: a hand-made client writes requests into a real
// ring and a fake ProductSubmitter stands in for the service. Checks what
// the reactor submits in the ring owner's name and how answers and errors
// reach the slots.
#include "server/api/ring_reactor.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/ring/testing/hand_made_ring.h"
#include "server/transport/peer_identity.h"

namespace matmul {
namespace {

using ::testing::HasSubstr;

// Records every submission; answers at once unless told to hold them.
class FakeSubmitter final : public ProductSubmitter {
 public:
  struct Submission {
    CallControl control;
    v1::MatmulRequest request;
    v1::MatmulResponse* response = nullptr;
    absl::AnyInvocable<void(absl::Status) &&> done;
  };

  void Submit(CallControl control, const v1::MatmulRequest* request,
              v1::MatmulResponse* response,
              absl::AnyInvocable<void(absl::Status) &&> done) override {
    absl::MutexLock lock(&mu_);
    Submission& s = submissions_.emplace_back();
    s.control = std::move(control);
    s.request = *request;
    s.response = response;
    if (hold_) {
      s.done = std::move(done);
      return;
    }
    if (!answer_.ok()) {
      std::move(done)(answer_);
      return;
    }
    response->set_request_id(request->request_id());
    response->set_kernel("fake-kernel");
    std::move(done)(absl::OkStatus());
  }

  void AnswerWith(absl::Status status) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(status);
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  // Waits for the `n`th submission (from 1) and returns it; the reactor's
  // poller adds them.
  Submission& WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return submissions_.size() >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&arrived), kLostWakeup);
    EXPECT_GE(submissions_.size(), n);
    return submissions_[n - 1];
  }

 private:
  absl::Mutex mu_;
  std::deque<Submission> submissions_ ABSL_GUARDED_BY(mu_);
  absl::Status answer_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
};

class RingReactorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<AttachedRing>> ring =
        AttachedRing::Open(made_.Request(), "matmul", ThisProcess());
    ASSERT_TRUE(ring.ok()) << ring.status();
    ring_ = *std::move(ring);
    reactor_ =
        new RingReactor(submitter_, pollers_, ring_, "ring-session", owner_,
                        [this](RingReactor*) { done_.Notify(); });
  }
  void TearDown() override {
    // gRPC calls OnDone last; the reactor then deletes itself.
    if (reactor_ != nullptr) reactor_->OnDone();
    EXPECT_TRUE(done_.HasBeenNotified());
  }

  HandMadeRing made_;
  HandMadeClient client_{made_.base()};
  const PeerCredentials owner_ = ThisProcess();
  FakeSubmitter submitter_;
  RingPollers pollers_{1, absl::ZeroDuration()};
  std::shared_ptr<AttachedRing> ring_;
  RingReactor* reactor_ = nullptr;
  absl::Notification done_;
};

TEST_F(RingReactorTest, SubmitsInTheRingOwnersNameAndSession) {
  v1::MatmulRequest request;
  request.set_request_id(41);
  request.set_session_id("someone-elses-session");
  const absl::Time before = absl::Now();
  client_.Submit(2, request, /*notify=*/false, absl::Seconds(30));
  EXPECT_EQ(client_.WaitForAnswer(2), 41u);

  FakeSubmitter::Submission& s = submitter_.WaitFor(1);
  EXPECT_EQ(s.request.request_id(), 41u);
  EXPECT_EQ(s.request.session_id(), "ring-session");
  ASSERT_TRUE(s.control.caller.has_value());
  EXPECT_TRUE(s.control.caller->same_process(owner_));
  EXPECT_EQ(s.control.client_key, ClientKey(owner_));
  EXPECT_GE(s.control.deadline, before + absl::Seconds(30));
  EXPECT_LE(s.control.deadline, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(s.control.cancelled);
  EXPECT_FALSE(s.control.cancelled());
}

TEST_F(RingReactorTest, WithoutATimeoutThereIsNoDeadline) {
  v1::MatmulRequest request;
  request.set_request_id(1);
  client_.Submit(0, request, false, absl::ZeroDuration());
  EXPECT_EQ(client_.WaitForAnswer(0), 1u);
  EXPECT_EQ(submitter_.WaitFor(1).control.deadline, absl::InfiniteFuture());
}

TEST_F(RingReactorTest, AnErrorIsAnsweredInTheSlot) {
  submitter_.AnswerWith(absl::ResourceExhaustedError("over the quota"));
  v1::MatmulRequest request;
  request.set_request_id(9);
  client_.Submit(1, request, false, absl::ZeroDuration());
  const v1::MatmulResponse response = client_.WaitForResponse(1);
  EXPECT_EQ(response.request_id(), 9u);
  EXPECT_EQ(response.status_code(),
            static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(response.status_message(), "over the quota");
  EXPECT_FALSE(response.has_c());
}

TEST_F(RingReactorTest, CancellingTheStreamCancelsWhatIsInFlight) {
  submitter_.Hold();
  v1::MatmulRequest request;
  request.set_request_id(5);
  client_.Submit(3, request, false, absl::ZeroDuration());
  FakeSubmitter::Submission& s = submitter_.WaitFor(1);
  EXPECT_FALSE(s.control.cancelled());
  reactor_->OnCancel();
  EXPECT_TRUE(s.control.cancelled());
  // A late answer still lands in its slot: the ring outlives the stream
  // for the requests in flight.
  s.response->set_request_id(5);
  std::move(s.done)(absl::OkStatus());
  EXPECT_EQ(client_.WaitForAnswer(3), 5u);
}

}  // namespace
}  // namespace matmul
