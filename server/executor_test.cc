#include "server/executor.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using IntExecutor = Executor<int>;

absl::Status Submit(IntExecutor& executor, int item) {
  return executor.Submit("k", std::move(item));
}

TEST(ExecutorTest, RunsEveryAcceptedItemOnceEvenAcrossShutdown) {
  std::vector<std::atomic<int>> runs(50);
  auto executor = IntExecutor::Create(
      {.worker_threads = 2, .batching = {.max_batch_size = 4}},
      [&](std::vector<int> batch) {
        EXPECT_LE(batch.size(), 4u);
        for (int item : batch) runs[item].fetch_add(1);
      });
  ASSERT_TRUE(executor.ok()) << executor.status();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(Submit(**executor, i).ok());
  (*executor)->Shutdown();
  for (int i = 0; i < 50; ++i) EXPECT_EQ(runs[i].load(), 1) << "item " << i;
}

// One worker, held busy by the first item: what arrives meanwhile forms
// the next batch (up to max_batch_size), and a full queue refuses at once.
TEST(ExecutorTest, BatchesFormWhileTheWorkerIsBusyAndAFullQueueRefuses) {
  absl::Notification running;
  absl::Notification release;
  absl::Mutex mu;
  std::vector<std::vector<int>> batches;
  auto executor = IntExecutor::Create(
      {.worker_threads = 1,
       .batching = {.max_batch_size = 3, .max_queue_size = 5}},
      [&](std::vector<int> batch) {
        if (batch.front() == 0) {
          running.Notify();
          release.WaitForNotification();
        }
        absl::MutexLock lock(&mu);
        batches.push_back(std::move(batch));
      });
  ASSERT_TRUE(executor.ok());
  ASSERT_TRUE(Submit(**executor, 0).ok());
  running.WaitForNotification();
  EXPECT_EQ((*executor)->running(), 1);
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(Submit(**executor, i).ok());
  EXPECT_EQ(Submit(**executor, 6).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*executor)->queue_depth(), 5);
  release.Notify();
  (*executor)->Shutdown();
  absl::MutexLock lock(&mu);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1], (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(batches[2], (std::vector<int>{4, 5}));
}

TEST(ExecutorTest, RefusesAfterShutdownWithUnavailable) {
  auto executor = IntExecutor::Create({}, [](std::vector<int>) {});
  ASSERT_TRUE(executor.ok());
  (*executor)->Shutdown();
  EXPECT_EQ(Submit(**executor, 1).code(), absl::StatusCode::kUnavailable);
}

TEST(ExecutorTest, RejectsBadOptions) {
  auto run = [](std::vector<int>) {};
  EXPECT_FALSE(IntExecutor::Create({.worker_threads = 0}, run).ok());
  EXPECT_FALSE(
      IntExecutor::Create({.batching = {.max_batch_size = 0}}, run).ok());
  EXPECT_FALSE(
      IntExecutor::Create({.batching = {.max_queue_size = 0}}, run).ok());
}

}  // namespace
}  // namespace matmul
