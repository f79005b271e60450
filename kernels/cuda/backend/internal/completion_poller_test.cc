// CompletionPoller on the CPU: launches that end in any order complete
// once each, on the poller's thread, and the destructor waits for those
// still pending.
#include "kernels/cuda/backend/internal/completion_poller.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace matmul::cuda {
namespace {

TEST(CompletionPollerTest, CompletesEachLaunchOnceWhenReadyInAnyOrder) {
  constexpr int kLaunches = 200;
  std::vector<std::atomic<bool>> ended(kLaunches);
  std::vector<std::atomic<int>> completed(kLaunches);
  std::atomic<bool> wrong_thread{false};
  std::thread::id poller_thread;
  absl::Notification started;
  {
    CompletionPoller poller({.idle_spin = absl::Microseconds(100)}, [&] {
      poller_thread = std::this_thread::get_id();
      started.Notify();
    });
    started.WaitForNotification();
    for (int i = 0; i < kLaunches; ++i) {
      poller.Add({.ready = [&, i] { return ended[i].load(); },
                  .complete =
                      [&, i] {
                        // Never before its end.
                        EXPECT_TRUE(ended[i].load()) << i;
                        if (std::this_thread::get_id() != poller_thread) {
                          wrong_thread = true;
                        }
                        completed[i].fetch_add(1);
                      }});
    }
    // End them in a random order, with pauses that let the poller sleep.
    std::vector<int> order(kLaunches);
    for (int i = 0; i < kLaunches; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(),
                 std::mt19937(std::random_device{}()));
    for (int j = 0; j < kLaunches; ++j) {
      ended[order[j]] = true;
      if (j % 50 == 0) absl::SleepFor(absl::Milliseconds(5));
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (poller.pending() > 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(poller.pending(), 0);
  }
  for (int i = 0; i < kLaunches; ++i) EXPECT_EQ(completed[i].load(), 1) << i;
  EXPECT_FALSE(wrong_thread);
}

TEST(CompletionPollerTest, DestructorWaitsForPendingLaunches) {
  std::atomic<bool> ended{false};
  std::atomic<bool> completed{false};
  std::thread ender;
  {
    CompletionPoller poller({});
    poller.Add({.ready = [&] { return ended.load(); },
                .complete = [&] { completed = true; }});
    ender = std::thread([&] {
      absl::SleepFor(absl::Milliseconds(50));
      ended = true;
    });
  }  // returns only once the launch has ended and completed
  EXPECT_TRUE(completed);
  ender.join();
}

TEST(CompletionPollerTest, WakesFromSleepForALaunchAddedLater) {
  std::atomic<int> completed{0};
  CompletionPoller poller({.idle_spin = absl::ZeroDuration()});
  for (int i = 0; i < 3; ++i) {
    absl::SleepFor(absl::Milliseconds(20));  // the poller sleeps meanwhile
    poller.Add({.ready = [] { return true; },
                .complete = [&] { completed.fetch_add(1); }});
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (completed.load() <= i && absl::Now() < deadline) {
      absl::SleepFor(absl::Microseconds(100));
    }
    EXPECT_EQ(completed.load(), i + 1);
  }
}

// busy() counts the thread's time in ready() and in complete() apart,
// neither less than the time those calls took.
TEST(CompletionPollerTest, BusyTimeCountsPollingAndCompletingApart) {
  constexpr absl::Duration kComplete = absl::Milliseconds(200);
  constexpr absl::Duration kPoll = absl::Milliseconds(5);
  std::atomic<int> polls{0};
  absl::Notification done;
  CompletionPoller poller({});
  poller.Add({.ready =
                  [&] {
                    absl::SleepFor(kPoll);
                    return polls.fetch_add(1) == 2;  // the third poll
                  },
              .complete =
                  [&] {
                    absl::SleepFor(kComplete);
                    done.Notify();
                  }});
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (poller.pending() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const CompletionPoller::BusyTime busy = poller.busy();
  EXPECT_EQ(polls.load(), 3);
  EXPECT_GE(busy.polling, 3 * kPoll);
  EXPECT_LT(busy.polling, kComplete);  // none of the completion
  EXPECT_GE(busy.completing, kComplete);
}

}  // namespace
}  // namespace matmul::cuda
