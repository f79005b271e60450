// The CPU side of a stream-ordered product's wait (client_stream_order.h):
// WaitForClientStreams returns once the client's stream has written its
// word, or once the caller has had enough (every earlier product of the
// client launched, in the CUDA backend), or with give_up's error; a wait
// queued on the GPU (AwaitQueuedWaits) is released from the host when the
// client is given up on. No GPU: the GPU's wait is played by done().
#include "kernels/cuda/backend/internal/client_stream_order.h"

#include <atomic>
#include <cstdint>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/launch_order.h"
#include "common/gemm/stream_order.h"
#include "gtest/gtest.h"

namespace matmul::cuda {
namespace {

// A stream-ordered problem waiting for `value` in `word`.
struct Ordered {
  explicit Ordered(std::atomic<uint32_t>* word, uint32_t value) {
    order.wait_host = word;
    order.wait_value = value;
    problem.stream_order = &order;
  }
  StreamOrder order;
  GemmProblem problem;
};

TEST(ClientStreamOrderTest, ReturnsAtOnceWhereTheWordIsThere) {
  std::atomic<uint32_t> word{7};
  Ordered ordered(&word, 7);
  const GemmProblem* one[] = {&ordered.problem};
  EXPECT_TRUE(WaitForClientStreams(one).ok());
}

TEST(ClientStreamOrderTest, WaitsUntilTheClientsStreamWritesTheWord) {
  std::atomic<uint32_t> word{6};
  Ordered ordered(&word, 7);
  const GemmProblem* one[] = {&ordered.problem};
  std::atomic<bool> written{false};
  std::thread stream([&] {
    absl::SleepFor(absl::Milliseconds(20));
    written.store(true);
    word.store(7, std::memory_order_release);
  });
  EXPECT_TRUE(WaitForClientStreams(one).ok());
  EXPECT_TRUE(written.load());
  stream.join();
}

// The CUDA backend's way where the wait may go to the GPU: it stops
// waiting on the CPU once the earlier products are launched.
TEST(ClientStreamOrderTest, ReturnsOnceTheCallerHasHadEnough) {
  std::atomic<uint32_t> word{0};
  Ordered ordered(&word, 1);
  LaunchOrder launches(absl::Hours(1));
  absl::StatusOr<LaunchOrder::Ticket> earlier = launches.Take(1, 1);
  absl::StatusOr<LaunchOrder::Ticket> this_one = launches.Take(2, 1);
  ASSERT_TRUE(earlier.ok() && this_one.ok());
  ordered.order.launch = *std::move(this_one);
  const GemmProblem* one[] = {&ordered.problem};
  std::thread launcher([&] {
    absl::SleepFor(absl::Milliseconds(20));
    earlier->MarkLaunched();
  });
  // Bounds the test where `enough` went unheard.
  const absl::Time start = absl::Now();
  ordered.order.give_up = [&] {
    return absl::Now() - start < absl::Seconds(5)
               ? absl::OkStatus()
               : absl::DeadlineExceededError("enough went unheard");
  };
  const LaunchOrder::Ticket& launch = ordered.order.launch;
  EXPECT_TRUE(
      WaitForClientStreams(one, [&] { return launch.EarlierLaunched(); }).ok());
  EXPECT_TRUE(launch.EarlierLaunched());
  EXPECT_EQ(word.load(), 0u);  // the word never came
  launcher.join();
}

TEST(ClientStreamOrderTest, GiveUpEndsAWaitForAStreamThatNeverGetsThere) {
  std::atomic<uint32_t> word{0};
  Ordered ordered(&word, 1);
  int asked = 0;
  ordered.order.give_up = [&] {
    return ++asked < 3 ? absl::OkStatus()
                       : absl::DeadlineExceededError("the deadline passed");
  };
  const GemmProblem* one[] = {&ordered.problem};
  EXPECT_EQ(WaitForClientStreams(one, [] { return false; }).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(asked, 3);
}

// The GPU's wait ends once the word reaches its value; a client given up
// on never writes it, so the daemon does, and reports give_up's error.
TEST(ClientStreamOrderTest, AQueuedWaitForAClientGivenUpOnIsReleased) {
  std::atomic<uint32_t> word{0};
  Ordered ordered(&word, 9);
  int asked = 0;
  ordered.order.give_up = [&] {
    return ++asked < 2 ? absl::OkStatus()
                       : absl::CancelledError("the client went away");
  };
  const GemmProblem* one[] = {&ordered.problem};
  const absl::Status status = AwaitQueuedWaits(
      one, [&] { return word.load(std::memory_order_acquire) == 9; });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(word.load(), 9u);
  EXPECT_EQ(asked, 2);
}

TEST(ClientStreamOrderTest, AQueuedWaitOfAReachedWordIsNotAskedAbout) {
  std::atomic<uint32_t> word{9};
  Ordered ordered(&word, 9);
  bool asked = false;
  ordered.order.give_up = [&] {
    asked = true;
    return absl::CancelledError("not to be asked");
  };
  const GemmProblem* one[] = {&ordered.problem};
  // The GPU takes a while to run the product after its wait.
  const absl::Time done = absl::Now() + absl::Milliseconds(20);
  EXPECT_TRUE(AwaitQueuedWaits(one, [&] { return absl::Now() > done; }).ok());
  EXPECT_FALSE(asked);
}

TEST(ClientStreamOrderTest, ReleasedWaitsHoldTheirValues) {
  std::atomic<uint32_t> first{3}, second{0};
  Ordered a(&first, 4), b(&second, 0xfffffff0u);
  GemmProblem plain;  // not stream-ordered: left alone
  const GemmProblem* problems[] = {&a.problem, &plain, &b.problem};
  ReleaseQueuedWaits(problems);
  EXPECT_EQ(first.load(), 4u);
  EXPECT_EQ(second.load(), 0xfffffff0u);
}

}  // namespace
}  // namespace matmul::cuda
