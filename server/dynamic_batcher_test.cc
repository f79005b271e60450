#include "server/dynamic_batcher.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace matmul {
namespace {

// Records every batch the batcher closes, with when it closed.
struct Recorder {
  struct Batch {
    std::string key;
    std::vector<int> items;
    absl::Time closed;
  };
  absl::Mutex mu;
  std::vector<Batch> batches;

  DynamicBatcher<int>::RunBatch Run() {
    return [this](const std::string& key, std::vector<int> items) {
      absl::MutexLock lock(&mu);
      batches.push_back({key, std::move(items), absl::Now()});
    };
  }
  int ItemCount() {
    absl::MutexLock lock(&mu);
    int count = 0;
    for (const Batch& b : batches) count += b.items.size();
    return count;
  }
};

bool WaitFor(std::function<bool()> condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(DynamicBatcherTest, FullBatchesCloseAtOnceInOrder) {
  Recorder recorder;
  // A long delay: only the size bound can close these batches quickly.
  DynamicBatcher<int> batcher(
      {.max_batch_size = 4, .max_queue_delay = absl::Seconds(30)},
      recorder.Run());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(batcher.Enqueue("k", i).ok());
  ASSERT_TRUE(WaitFor([&] { return recorder.ItemCount() == 8; }));
  absl::MutexLock lock(&recorder.mu);
  ASSERT_EQ(recorder.batches.size(), 2u);
  EXPECT_EQ(recorder.batches[0].items, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(recorder.batches[1].items, (std::vector<int>{4, 5, 6, 7}));
}

TEST(DynamicBatcherTest, ALoneItemWaitsTheDelayAndNoLonger) {
  Recorder recorder;
  const absl::Duration delay = absl::Milliseconds(50);
  DynamicBatcher<int> batcher({.max_batch_size = 8, .max_queue_delay = delay},
                              recorder.Run());
  const absl::Time enqueued = absl::Now();
  ASSERT_TRUE(batcher.Enqueue("k", 1).ok());
  ASSERT_TRUE(WaitFor([&] { return recorder.ItemCount() == 1; }));
  absl::MutexLock lock(&recorder.mu);
  const absl::Duration waited = recorder.batches[0].closed - enqueued;
  EXPECT_GE(waited, delay);
  // Generous slack for a loaded 2-core machine; the point is "not never".
  EXPECT_LT(waited, delay + absl::Seconds(2));
}

TEST(DynamicBatcherTest, KeysNeverShareABatch) {
  Recorder recorder;
  DynamicBatcher<int> batcher(
      {.max_batch_size = 16, .max_queue_delay = absl::Milliseconds(20)},
      recorder.Run());
  std::vector<std::thread> producers;
  for (int t = 0; t < 4; ++t) {
    producers.emplace_back([&batcher, t] {
      for (int i = 0; i < 25; ++i) {
        ASSERT_TRUE(batcher.Enqueue(t % 2 ? "odd" : "even", t * 100 + i).ok());
      }
    });
  }
  for (std::thread& p : producers) p.join();
  ASSERT_TRUE(WaitFor([&] { return recorder.ItemCount() == 100; }));
  absl::MutexLock lock(&recorder.mu);
  for (const Recorder::Batch& batch : recorder.batches) {
    EXPECT_LE(batch.items.size(), 16u);
    for (int item : batch.items) {
      EXPECT_EQ(batch.key, (item / 100) % 2 ? "odd" : "even");
    }
  }
  // Under concurrency the batches are mostly full, not one item each.
  EXPECT_LT(recorder.batches.size(), 20u);
}

TEST(DynamicBatcherTest, FullQueueRefusesAndShutdownFlushesEverything) {
  Recorder recorder;
  DynamicBatcher<int> batcher({.max_batch_size = 100,
                               .max_queue_delay = absl::Seconds(30),
                               .max_queue_size = 3},
                              recorder.Run());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(batcher.Enqueue("k", i).ok());
  EXPECT_EQ(batcher.Enqueue("k", 3).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(batcher.queued(), 3);
  batcher.Shutdown();  // long before the 30 s delay
  EXPECT_EQ(recorder.ItemCount(), 3);
  EXPECT_EQ(batcher.Enqueue("k", 4).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace matmul
