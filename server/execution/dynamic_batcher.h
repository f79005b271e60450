// Groups queued items by batch key so that requests which can share one
// launch (same device, M, N, K, layouts, dtypes and scalars) run together.
// The batcher is a queue, not a thread: idle workers call Next(), which
// hands out a key's batch when it is due:
//   * it holds `max_batch_size` items, or
//   * its oldest item has waited `max_queue_delay`, or
//   * the batcher is shutting down.
// Because only idle workers ask, a delay of 0 batches exactly what queued
// while every worker was busy (no added latency at low load, big batches
// under load), and a positive delay lets an idle worker wait for a fuller
// batch, never longer than the delay. Admission is immediate: past
// `max_queue_size` queued items, Enqueue refuses with RESOURCE_EXHAUSTED.
// After Shutdown, Next() drains what is queued and then returns nullopt,
// so no accepted item is lost.
//
// Under load, a GPU queues launches faster than it runs them: every worker
// would take its request alone and queue it on a stream, and no batch
// would form. `launches_in_flight_per_key` bounds the launches of one key
// that are handed out and not yet complete (each batch carries a
// LaunchHold until then): the key's next requests wait here meanwhile and
// go out together when one ends. Keys capped at batches of one are not
// bounded (waiting cannot make them batch).
#ifndef MATMUL_SERVER_EXECUTION_DYNAMIC_BATCHER_H_
#define MATMUL_SERVER_EXECUTION_DYNAMIC_BATCHER_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/adaptive_spin.h"
#include "server/execution/launch_hold.h"

namespace matmul {

struct BatcherOptions {
  int max_batch_size = 32;
  absl::Duration max_queue_delay = absl::ZeroDuration();
  int max_queue_size = 256;  // queued items over all keys
  // The longest an idle worker polls an empty queue before it sleeps: a
  // request arriving meanwhile is taken without a futex wake-up (tens of
  // microseconds on some hosts), at the price of a busy core. One worker
  // at a time polls, for as long as the recent gaps between requests
  // suggest (adaptive_spin.h). 0: sleep at once.
  absl::Duration worker_spin = absl::ZeroDuration();
  // Batches of one key handed out and not yet complete (their LaunchHold
  // not given back) before the next waits for one to end. 0: no bound.
  int launches_in_flight_per_key = 0;
};

// Validates the options; the message names the field.
absl::Status CheckBatcherOptions(const BatcherOptions& options);

template <typename Item>
class DynamicBatcher {
 public:
  struct Batch {
    std::string key;
    std::vector<Item> items;  // in arrival order
    // Empty unless the key's launches in flight are bounded: give it back
    // once the launch is complete.
    LaunchHold hold;
  };

  explicit DynamicBatcher(const BatcherOptions& options)
      : options_(options), spin_(options.worker_spin) {}

  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;
  // The holds handed out refer to this batcher.
  ~DynamicBatcher() { AwaitHoldsGivenBack(); }

  // RESOURCE_EXHAUSTED when the queues are full, UNAVAILABLE after
  // Shutdown; `item` is moved from only when it is accepted, so that the
  // caller can still answer a refused one. `max_batch` (> 0) caps the
  // batches of this key below max_batch_size; the key's first item sets it.
  absl::Status Enqueue(const std::string& key, Item&& item, int max_batch = 0) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the server is shutting down");
    if (queued_ >= options_.max_queue_size) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the queue is full (", options_.max_queue_size,
                       " requests waiting); retry later"));
    }
    KeyQueue& queue = queues_[key];
    if (queue.items.empty() && queue.launches == 0) {
      queue.max_batch = CapFor(max_batch);
    }
    const absl::Time now = absl::Now();
    spin_.Arrived(now);
    queue.items.push_back({now, std::move(item)});
    ++queued_;
    queued_hint_.store(queued_, std::memory_order_relaxed);
    // Wake a waiting worker only when this item makes a batch due sooner
    // than it planned: a new key (its deadline may be the earliest) or a
    // full batch; not while the key is at its launch bound (the end of a
    // launch wakes one). Any other item joins a batch whose deadline the worker
    // already waits for; waking it would put a futex call in the
    // submitter's path and a wake-up for nothing in the worker's, for
    // every request of a filling batch. Nor while a worker polls: it takes
    // the item (once its poll ends it looks under the lock, after this).
    if ((queue.items.size() == 1 ||
         static_cast<int>(queue.items.size()) >= queue.max_batch) &&
        !AtLaunchBound(queue) && !spinning_.load(std::memory_order_seq_cst)) {
      work_.Signal();
    }
    return absl::OkStatus();
  }

  // Blocks until a batch is due and returns it; nullopt once Shutdown has
  // been called and nothing is left.
  std::optional<Batch> Next() {
    Spin();
    absl::MutexLock lock(&mu_);
    while (true) {
      auto [due_key, next] = Due(absl::Now());
      if (due_key != nullptr) {
        Batch batch = Take(*due_key);
        // What is left may be what a polling worker took in Enqueue's
        // stead: another worker sees to it (unless only keys at their
        // launch bound are left).
        if (queued_ > 0 && Due(absl::Now()).second != absl::InfiniteFuture()) {
          work_.Signal();
        }
        return batch;
      }
      if (stopping_ && queued_ == 0) return std::nullopt;
      work_.WaitWithDeadline(&mu_, next);
    }
  }

  // A batch of `item` alone, taken at once, when nothing of any key is
  // queued and `key` may launch now; nullopt, with `item` untouched,
  // otherwise (Enqueue it then).
  std::optional<Batch> TakeAlone(const std::string& key, Item& item,
                                 int max_batch = 0) {
    absl::MutexLock lock(&mu_);
    if (stopping_ || queued_ > 0) return std::nullopt;
    auto [it, added] = queues_.try_emplace(key);
    KeyQueue& queue = it->second;
    if (added) queue.max_batch = CapFor(max_batch);
    if (AtLaunchBound(queue)) return std::nullopt;
    Batch batch;
    batch.key = key;
    batch.items.push_back(std::move(item));
    batch.hold = HoldFor(key, queue);
    if (queue.launches == 0) queues_.erase(it);
    return batch;
  }

  // Blocks until every LaunchHold handed out has been given back.
  void AwaitHoldsGivenBack() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* holds) { return *holds == 0; }, &holds_));
  }

  int queued() const {
    absl::MutexLock lock(&mu_);
    return queued_;
  }

  // Refuses new items; Next() hands out what is queued without waiting for
  // the delay, then nullopt. Idempotent.
  void Shutdown() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stopping_hint_.store(true, std::memory_order_relaxed);
    work_.SignalAll();
  }

 private:
  struct Queued {
    absl::Time enqueued;
    Item item;
  };
  struct KeyQueue {
    std::deque<Queued> items;
    int max_batch = 1;
    // Its batches handed out whose LaunchHold is not given back.
    int launches = 0;
  };

  int CapFor(int max_batch) const {
    return max_batch > 0 ? std::min(max_batch, options_.max_batch_size)
                         : options_.max_batch_size;
  }

  bool Bounded(const KeyQueue& queue) const {
    return options_.launches_in_flight_per_key > 0 && queue.max_batch > 1;
  }

  bool AtLaunchBound(const KeyQueue& queue) const {
    return Bounded(queue) &&
           queue.launches >= options_.launches_in_flight_per_key;
  }

  // Counts a launch of `queue` (under `key`) until its hold is given back.
  LaunchHold HoldFor(const std::string& key, KeyQueue& queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!Bounded(queue)) return LaunchHold();
    ++queue.launches;
    ++holds_;
    return LaunchHold([this, key] { LaunchEnded(key); });
  }

  void LaunchEnded(const std::string& key) {
    absl::MutexLock lock(&mu_);
    --holds_;
    auto it = queues_.find(key);
    KeyQueue& queue = it->second;
    --queue.launches;
    if (!queue.items.empty()) {
      work_.Signal();  // its next batch may be due now
    } else if (queue.launches == 0) {
      queues_.erase(it);
    }
  }

  // The key whose batch is due now, with the time the next one will be due
  // when none is (absl::InfiniteFuture() when all queues are empty or at
  // their launch bound: the end of a launch wakes the workers). The
  // longest-waiting queue goes first, so no key starves.
  std::pair<const std::string*, absl::Time> Due(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string* oldest_key = nullptr;
    const std::string* full_key = nullptr;
    absl::Time oldest = absl::InfiniteFuture();
    absl::Time oldest_full = absl::InfiniteFuture();
    for (const auto& [key, queue] : queues_) {
      if (queue.items.empty() || AtLaunchBound(queue)) continue;
      const absl::Time front = queue.items.front().enqueued;
      if (static_cast<int>(queue.items.size()) >= queue.max_batch &&
          front < oldest_full) {
        oldest_full = front;
        full_key = &key;
      }
      if (front < oldest) {
        oldest = front;
        oldest_key = &key;
      }
    }
    if (oldest_key == nullptr) return {nullptr, absl::InfiniteFuture()};
    const absl::Time due = oldest + options_.max_queue_delay;
    if (stopping_ || due <= now) return {oldest_key, now};
    if (full_key != nullptr) return {full_key, now};
    return {nullptr, due};
  }

  Batch Take(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Batch batch;
    batch.key = key;
    auto it = queues_.find(key);
    KeyQueue& queue = it->second;
    while (!queue.items.empty() &&
           static_cast<int>(batch.items.size()) < queue.max_batch) {
      batch.items.push_back(std::move(queue.items.front().item));
      queue.items.pop_front();
    }
    batch.hold = HoldFor(key, queue);
    if (queue.items.empty() && queue.launches == 0) queues_.erase(it);
    queued_ -= static_cast<int>(batch.items.size());
    queued_hint_.store(queued_, std::memory_order_relaxed);
    return batch;
  }

  // Polls the queue while the spin says so, unless another worker already
  // does.
  void Spin() {
    const absl::Time now = absl::Now();
    const absl::Time until = spin_.SpinUntil(now);
    if (until <= now || queued_hint_.load(std::memory_order_relaxed) != 0) {
      return;
    }
    if (spinning_.exchange(true, std::memory_order_seq_cst)) return;
    while (queued_hint_.load(std::memory_order_relaxed) == 0 &&
           !stopping_hint_.load(std::memory_order_relaxed) &&
           absl::Now() < until) {
    }
    spinning_.store(false, std::memory_order_seq_cst);
  }

  const BatcherOptions options_;
  AdaptiveSpin spin_;
  // A worker polls (Spin): Enqueue need not wake one.
  std::atomic<bool> spinning_{false};
  mutable absl::Mutex mu_;
  absl::CondVar work_;
  // Only queues with items or launches in flight are kept.
  absl::flat_hash_map<std::string, KeyQueue> queues_ ABSL_GUARDED_BY(mu_);
  int queued_ ABSL_GUARDED_BY(mu_) = 0;
  int holds_ ABSL_GUARDED_BY(mu_) = 0;  // LaunchHolds not given back
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Copies of queued_ and stopping_ that the idle spin reads without the
  // lock (a stale value only ends the spin early or late).
  std::atomic<int> queued_hint_{0};
  std::atomic<bool> stopping_hint_{false};
};

inline absl::Status CheckBatcherOptions(const BatcherOptions& options) {
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_size is ", options.max_batch_size, "; expected >= 1"));
  }
  if (options.max_queue_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_queue_delay is ", absl::FormatDuration(options.max_queue_delay),
        "; expected >= 0"));
  }
  if (options.worker_spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("worker_spin must be >= 0");
  }
  if (options.launches_in_flight_per_key < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("launches_in_flight_per_key is ",
                     options.launches_in_flight_per_key, "; expected >= 0"));
  }
  if (options.max_queue_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_queue_size is ", options.max_queue_size, "; expected >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTION_DYNAMIC_BATCHER_H_
