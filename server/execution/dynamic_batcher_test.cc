#include "server/execution/dynamic_batcher.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

using Batcher = DynamicBatcher<int>;

absl::Status Add(Batcher& batcher, const std::string& key, int item) {
  return batcher.Enqueue(key, std::move(item));
}

TEST(DynamicBatcherTest, FullBatchesAreDueAtOnceInOrder) {
  // A long delay: only the size bound can make these batches due.
  Batcher batcher({.max_batch_size = 4, .max_queue_delay = absl::Seconds(30)});
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Add(batcher, "k", i).ok());
  const absl::Time start = absl::Now();
  std::optional<Batcher::Batch> first = batcher.Next();
  std::optional<Batcher::Batch> second = batcher.Next();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->items, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(second->items, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(first->key, "k");
  EXPECT_EQ(batcher.queued(), 0);
}

TEST(DynamicBatcherTest, AKeysOwnCapBoundsItsBatches) {
  Batcher batcher({.max_batch_size = 4, .max_queue_delay = absl::Seconds(30)});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(batcher.Enqueue("alone", std::move(i), /*max_batch=*/1).ok());
  }
  for (int i = 10; i < 13; ++i) {
    ASSERT_TRUE(batcher.Enqueue("pairs", std::move(i), /*max_batch=*/2).ok());
  }
  // Each capped batch is full, so due at once despite the long delay.
  std::vector<std::vector<int>> batches;
  for (int i = 0; i < 4; ++i) {
    std::optional<Batcher::Batch> batch = batcher.Next();
    ASSERT_TRUE(batch);
    batches.push_back(batch->items);
  }
  EXPECT_EQ(batches, (std::vector<std::vector<int>>{{0}, {1}, {2}, {10, 11}}));
  EXPECT_EQ(batcher.queued(), 1);  // 12 waits for its pair or the delay
}

TEST(DynamicBatcherTest, WithoutDelayAnIdleWorkerTakesWhatIsQueued) {
  Batcher batcher({.max_batch_size = 8});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Add(batcher, "k", i).ok());
  std::optional<Batcher::Batch> batch = batcher.Next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->items, (std::vector<int>{0, 1, 2}));
}

TEST(DynamicBatcherTest, ALoneItemWaitsTheDelayAndNoLonger) {
  const absl::Duration delay = absl::Milliseconds(50);
  Batcher batcher({.max_batch_size = 8, .max_queue_delay = delay});
  const absl::Time enqueued = absl::Now();
  ASSERT_TRUE(Add(batcher, "k", 1).ok());
  std::optional<Batcher::Batch> batch = batcher.Next();
  const absl::Duration waited = absl::Now() - enqueued;
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->items.size(), 1u);
  EXPECT_GE(waited, delay);
  // Generous slack for a loaded 2-core machine; the point is "not never".
  EXPECT_LT(waited, delay + absl::Seconds(2));
}

TEST(DynamicBatcherTest, KeysNeverShareABatchAndTheOldestGoesFirst) {
  Batcher batcher({.max_batch_size = 16});
  ASSERT_TRUE(Add(batcher, "even", 0).ok());
  ASSERT_TRUE(Add(batcher, "odd", 1).ok());
  ASSERT_TRUE(Add(batcher, "even", 2).ok());
  std::optional<Batcher::Batch> first = batcher.Next();
  std::optional<Batcher::Batch> second = batcher.Next();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->key, "even");
  EXPECT_EQ(first->items, (std::vector<int>{0, 2}));
  EXPECT_EQ(second->key, "odd");
  EXPECT_EQ(second->items, (std::vector<int>{1}));
}

TEST(DynamicBatcherTest, AWaitingWorkerWakesForANewItem) {
  Batcher batcher({.max_batch_size = 4});
  absl::Notification got;
  std::optional<Batcher::Batch> batch;
  std::thread worker([&] {
    batch = batcher.Next();
    got.Notify();
  });
  absl::SleepFor(absl::Milliseconds(20));  // let it block on the empty queue
  EXPECT_FALSE(got.HasBeenNotified());
  ASSERT_TRUE(Add(batcher, "k", 7).ok());
  EXPECT_TRUE(got.WaitForNotificationWithTimeout(absl::Seconds(10)));
  worker.join();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->items, (std::vector<int>{7}));
}

TEST(DynamicBatcherTest, PollingWorkersTakeEveryItemOfABurst) {
  // Items come close together, so an idle worker polls rather than sleeps,
  // and Enqueue leaves the polling worker to take them. Nothing may be
  // left behind: three workers take 4000 items of several keys from two
  // submitters, each item once.
  Batcher batcher({.max_batch_size = 4, .worker_spin = absl::Milliseconds(2)});
  std::atomic<int> taken{0};
  std::vector<std::atomic<int>> seen(4000);
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&] {
      while (std::optional<Batcher::Batch> batch = batcher.Next()) {
        for (int item : batch->items) {
          seen[item].fetch_add(1);
          taken.fetch_add(1);
        }
      }
    });
  }
  std::vector<std::thread> submitters;
  for (int s = 0; s < 2; ++s) {
    submitters.emplace_back([&, s] {
      for (int i = s; i < 4000; i += 2) {
        while (!Add(batcher, absl::StrCat("k", i % 3), i).ok()) {
          absl::SleepFor(absl::Microseconds(50));  // queue full: retry
        }
        if (i % 64 == 0) absl::SleepFor(absl::Microseconds(300));
      }
    });
  }
  for (std::thread& submitter : submitters) submitter.join();
  // Every item is taken without Shutdown's help.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (taken.load() < 4000 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(taken.load(), 4000);
  batcher.Shutdown();
  for (std::thread& worker : workers) worker.join();
  for (int i = 0; i < 4000; ++i) EXPECT_EQ(seen[i].load(), 1) << i;
}

TEST(DynamicBatcherTest, AnIdleWorkerSleepsAndIsWokenOrStopped) {
  Batcher batcher({.max_batch_size = 4, .worker_spin = absl::Seconds(30)});
  std::optional<Batcher::Batch> batch;
  std::thread worker([&] { batch = batcher.Next(); });
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(Add(batcher, "k", 3).ok());
  worker.join();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->items, (std::vector<int>{3}));
  // No short gaps seen: the worker sleeps, and Shutdown ends it.
  const absl::Time start = absl::Now();
  std::thread idle([&] { EXPECT_FALSE(batcher.Next()); });
  absl::SleepFor(absl::Milliseconds(20));
  batcher.Shutdown();
  idle.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(DynamicBatcherTest, FullQueueRefusesAndShutdownDrainsEverything) {
  DynamicBatcher<std::string> batcher({.max_batch_size = 2,
                                       .max_queue_delay = absl::Seconds(30),
                                       .max_queue_size = 3});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(batcher.Enqueue(i == 1 ? "b" : "a", std::to_string(i)).ok());
  }
  std::string refused = "kept";
  EXPECT_EQ(batcher.Enqueue("a", std::move(refused)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused, "kept");  // a refused item stays with the caller
  EXPECT_EQ(batcher.queued(), 3);
  batcher.Shutdown();  // long before the 30 s delay
  EXPECT_EQ(batcher.Enqueue("a", "4").code(), absl::StatusCode::kUnavailable);
  const absl::Time start = absl::Now();
  int drained = 0;
  while (std::optional<DynamicBatcher<std::string>::Batch> batch =
             batcher.Next()) {
    drained += static_cast<int>(batch->items.size());
  }
  EXPECT_EQ(drained, 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Two launches of a key in flight: its next items wait, whatever their
// count or age, and go out together once a hold is given back; a key
// capped at batches of one, and another key, are not held back.
TEST(DynamicBatcherTest, AKeyAtItsLaunchBoundWaitsForAHoldGivenBack) {
  Batcher batcher({.max_batch_size = 8, .launches_in_flight_per_key = 2});
  ASSERT_TRUE(Add(batcher, "k", 0).ok());
  std::optional<Batcher::Batch> first = batcher.Next();
  ASSERT_TRUE(Add(batcher, "k", 1).ok());
  std::optional<Batcher::Batch> second = batcher.Next();
  ASSERT_TRUE(first && second);
  for (int i = 2; i < 5; ++i) ASSERT_TRUE(Add(batcher, "k", i).ok());
  for (int i = 10; i < 13; ++i) {
    ASSERT_TRUE(batcher.Enqueue("alone", std::move(i), /*max_batch=*/1).ok());
  }
  ASSERT_TRUE(Add(batcher, "other", 20).ok());
  // What may go now, oldest first: the three alone, then "other".
  std::vector<std::string> keys;
  for (int i = 0; i < 4; ++i) {
    std::optional<Batcher::Batch> batch = batcher.Next();
    ASSERT_TRUE(batch);
    keys.push_back(batch->key);
  }
  EXPECT_EQ(keys,
            (std::vector<std::string>{"alone", "alone", "alone", "other"}));
  EXPECT_EQ(batcher.queued(), 3);
  std::optional<Batcher::Batch> third;
  std::thread worker([&] { third = batcher.Next(); });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(third);  // still held back
  first->hold.Release();
  worker.join();
  ASSERT_TRUE(third);
  EXPECT_EQ(third->items, (std::vector<int>{2, 3, 4}));
  // Two in flight again (second, third): a new item waits for one.
  ASSERT_TRUE(Add(batcher, "k", 5).ok());
  std::optional<Batcher::Batch> fourth;
  std::thread late([&] { fourth = batcher.Next(); });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(fourth);
  third.reset();  // a hold destroyed is given back too
  late.join();
  ASSERT_TRUE(fourth);
  EXPECT_EQ(fourth->items, (std::vector<int>{5}));
}

// Shutdown drains a held key as its launches end; the batcher's end waits
// for the holds still out.
TEST(DynamicBatcherTest, ShutdownDrainsAHeldKeyAsItsLaunchesEnd) {
  auto batcher = std::make_unique<Batcher>(
      BatcherOptions{.max_batch_size = 8, .launches_in_flight_per_key = 1});
  ASSERT_TRUE(Add(*batcher, "k", 0).ok());
  std::optional<Batcher::Batch> first = batcher->Next();
  ASSERT_TRUE(first);
  ASSERT_TRUE(Add(*batcher, "k", 1).ok());
  batcher->Shutdown();
  std::optional<Batcher::Batch> second;
  std::thread worker([&] {
    second = batcher->Next();
    EXPECT_FALSE(batcher->Next());
  });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(second);
  first->hold.Release();
  worker.join();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->items, (std::vector<int>{1}));
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    batcher.reset();
    destroyed = true;
  });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(destroyed.load());
  second.reset();
  destroyer.join();
}

TEST(DynamicBatcherTest, RejectsBadOptions) {
  EXPECT_FALSE(CheckBatcherOptions({.max_batch_size = 0}).ok());
  EXPECT_FALSE(
      CheckBatcherOptions({.max_queue_delay = absl::Microseconds(-1)}).ok());
  EXPECT_FALSE(CheckBatcherOptions({.max_queue_size = 0}).ok());
  EXPECT_FALSE(
      CheckBatcherOptions({.worker_spin = absl::Microseconds(-1)}).ok());
  EXPECT_FALSE(CheckBatcherOptions({.launches_in_flight_per_key = -1}).ok());
  EXPECT_TRUE(CheckBatcherOptions({}).ok());
}

}  // namespace
}  // namespace matmul
