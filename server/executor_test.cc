#include "server/executor.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

TEST(ExecutorTest, RunsEveryAcceptedJobOnceEvenAcrossShutdown) {
  auto executor =
      Executor::Create({.worker_threads = 2, .max_queue_size = 100});
  ASSERT_TRUE(executor.ok()) << executor.status();
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) {
    (*executor)->Submit([&ran](absl::Status admission) {
      ASSERT_TRUE(admission.ok()) << admission;
      ran.fetch_add(1);
    });
  }
  (*executor)->Shutdown();
  EXPECT_EQ(ran.load(), 50);
}

TEST(ExecutorTest, FullQueueRefusesAtOnceWithResourceExhausted) {
  auto executor = Executor::Create({.worker_threads = 1, .max_queue_size = 2});
  ASSERT_TRUE(executor.ok());
  absl::Notification release;
  absl::Notification running;
  (*executor)->Submit([&](absl::Status) {
    running.Notify();
    release.WaitForNotification();
  });
  running.WaitForNotification();  // the worker is busy; the queue is empty
  EXPECT_EQ((*executor)->running(), 1);
  int accepted_ran = 0;
  for (int i = 0; i < 2; ++i) {
    (*executor)->Submit([&](absl::Status s) {
      EXPECT_TRUE(s.ok());
      ++accepted_ran;
    });
  }
  absl::Status refusal;
  (*executor)->Submit([&](absl::Status s) { refusal = s; });
  EXPECT_EQ(refusal.code(), absl::StatusCode::kResourceExhausted) << refusal;
  EXPECT_EQ((*executor)->queue_depth(), 2);
  release.Notify();
  (*executor)->Shutdown();
  EXPECT_EQ(accepted_ran, 2);
}

TEST(ExecutorTest, RefusesAfterShutdownWithUnavailable) {
  auto executor = Executor::Create({.worker_threads = 1, .max_queue_size = 2});
  ASSERT_TRUE(executor.ok());
  (*executor)->Shutdown();
  absl::Status refusal;
  (*executor)->Submit([&](absl::Status s) { refusal = s; });
  EXPECT_EQ(refusal.code(), absl::StatusCode::kUnavailable);
}

TEST(ExecutorTest, RejectsBadOptions) {
  EXPECT_FALSE(Executor::Create({.worker_threads = 0}).ok());
  EXPECT_FALSE(
      Executor::Create({.worker_threads = 1, .max_queue_size = 0}).ok());
}

}  // namespace
}  // namespace matmul
