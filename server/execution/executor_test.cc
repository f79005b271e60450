#include "server/execution/executor.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
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
      [&](std::vector<int> batch, LaunchHold) {
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
      [&](std::vector<int> batch, LaunchHold) {
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

TEST(ExecutorTest, RunsAnItemOnTheCallersThreadWhenAWorkerIsIdle) {
  std::thread::id ran_on;
  std::vector<int> ran;
  auto executor = IntExecutor::Create({.worker_threads = 1},
                                      [&](std::vector<int> batch, LaunchHold) {
                                        ran_on = std::this_thread::get_id();
                                        ran = batch;
                                      });
  ASSERT_TRUE(executor.ok());
  int item = 7;
  EXPECT_TRUE((*executor)->TryRunHere("k", item));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(ran, (std::vector<int>{7}));
  EXPECT_EQ((*executor)->running(), 0);
}

// With every worker busy the item must queue (and batch) instead: running
// it on the caller would exceed worker_threads batches at once.
TEST(ExecutorTest, DoesNotRunOnTheCallerWhileEveryWorkerIsBusy) {
  absl::Notification running;
  absl::Notification release;
  std::atomic<int> batches{0};
  auto executor = IntExecutor::Create({.worker_threads = 1},
                                      [&](std::vector<int> batch, LaunchHold) {
                                        batches.fetch_add(1);
                                        if (batch.front() == 0) {
                                          running.Notify();
                                          release.WaitForNotification();
                                        }
                                      });
  ASSERT_TRUE(executor.ok());
  ASSERT_TRUE(Submit(**executor, 0).ok());
  running.WaitForNotification();
  int item = 1;
  EXPECT_FALSE((*executor)->TryRunHere("k", item));
  EXPECT_EQ(item, 1);
  EXPECT_EQ(batches.load(), 1);
  release.Notify();
  (*executor)->Shutdown();
}

// A worker blocked on the caller's thread holds its place: a second item
// may not run on another caller's thread beyond worker_threads.
TEST(ExecutorTest, RunsOnCallersCountAsRunningBatches) {
  absl::Notification running;
  absl::Notification release;
  auto executor = IntExecutor::Create({.worker_threads = 1},
                                      [&](std::vector<int> batch, LaunchHold) {
                                        if (batch.front() == 0) {
                                          running.Notify();
                                          release.WaitForNotification();
                                        }
                                      });
  ASSERT_TRUE(executor.ok());
  std::thread caller([&] {
    int first = 0;
    EXPECT_TRUE((*executor)->TryRunHere("k", first));
  });
  running.WaitForNotification();
  EXPECT_EQ((*executor)->running(), 1);
  int second = 1;
  EXPECT_FALSE((*executor)->TryRunHere("k", second));
  release.Notify();
  caller.join();
}

TEST(ExecutorTest, DoesNotRunOnTheCallerWhenBatchesWaitOrAfterShutdown) {
  std::atomic<int> runs{0};
  auto waiting = IntExecutor::Create(
      {.worker_threads = 1,
       .batching = {.max_queue_delay = absl::Milliseconds(1)}},
      [&](std::vector<int>, LaunchHold) { runs.fetch_add(1); });
  ASSERT_TRUE(waiting.ok());
  int item = 1;
  EXPECT_FALSE((*waiting)->TryRunHere("k", item));
  auto stopped = IntExecutor::Create(
      {.worker_threads = 1},
      [&](std::vector<int>, LaunchHold) { runs.fetch_add(1); });
  ASSERT_TRUE(stopped.ok());
  (*stopped)->Shutdown();
  EXPECT_FALSE((*stopped)->TryRunHere("k", item));
  EXPECT_EQ(runs.load(), 0);
}

// A key at its launch bound: its next items queue and go out as one batch
// when a launch's hold is given back, neither on the caller's thread nor
// on a second worker meanwhile.
TEST(ExecutorTest, AKeyAtItsLaunchBoundBatchesWhatArrivesMeanwhile) {
  absl::Mutex mu;
  std::vector<std::vector<int>> batches;
  std::vector<LaunchHold> holds;  // launches "in flight"
  auto executor = IntExecutor::Create(
      {.worker_threads = 2,
       .batching = {.max_batch_size = 8, .launches_in_flight_per_key = 1}},
      [&](std::vector<int> batch, LaunchHold hold) {
        absl::MutexLock lock(&mu);
        batches.push_back(std::move(batch));
        holds.push_back(std::move(hold));
      });
  ASSERT_TRUE(executor.ok());
  int first = 0;
  ASSERT_TRUE((*executor)->TryRunHere("k", first));
  int second = 1;
  EXPECT_FALSE((*executor)->TryRunHere("k", second));
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(Submit(**executor, i).ok());
  // Another key is not held back.
  ASSERT_TRUE((*executor)->Submit("other", 9).ok());
  auto count = [&] {
    absl::MutexLock lock(&mu);
    return batches.size();
  };
  while (count() < 2) absl::SleepFor(absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(50));  // time for a wrong launch
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(batches[1], (std::vector<int>{9}));
    EXPECT_EQ((*executor)->queue_depth(), 4);
    holds[0].Release();
  }
  while (count() < 3) absl::SleepFor(absl::Milliseconds(1));
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(batches[2], (std::vector<int>{1, 2, 3, 4}));
    holds.clear();
  }
  (*executor)->Shutdown();
}

TEST(ExecutorTest, RefusesAfterShutdownWithUnavailable) {
  auto executor = IntExecutor::Create({}, [](std::vector<int>, LaunchHold) {});
  ASSERT_TRUE(executor.ok());
  (*executor)->Shutdown();
  EXPECT_EQ(Submit(**executor, 1).code(), absl::StatusCode::kUnavailable);
}

TEST(ExecutorTest, RejectsBadOptions) {
  auto run = [](std::vector<int>, LaunchHold) {};
  EXPECT_FALSE(IntExecutor::Create({.worker_threads = 0}, run).ok());
  EXPECT_FALSE(
      IntExecutor::Create({.batching = {.max_batch_size = 0}}, run).ok());
  EXPECT_FALSE(
      IntExecutor::Create({.batching = {.max_queue_size = 0}}, run).ok());
  EXPECT_FALSE(
      IntExecutor::Create({.batching = {.launches_in_flight_per_key = -1}}, run)
          .ok());
}

}  // namespace
}  // namespace matmul
