// Groups queued items by batch key so that requests which can share one
// launch (same device, M, N, K, layouts and dtypes) run together. A key's
// batch closes when it holds `max_batch_size` items or when its oldest item
// has waited `max_queue_delay`; the closed batch goes to `run_batch` on the
// batcher's dispatch thread (which should hand it on quickly, e.g. to an
// Executor). Admission is immediate: past `max_queue_size` queued items,
// Enqueue refuses with RESOURCE_EXHAUSTED. Shutdown dispatches everything
// still queued, so no accepted item is lost.
//
// Not wired into the daemon yet (the batching issue does that); the
// Executor runs each request on its own meanwhile.
#ifndef MATMUL_SERVER_DYNAMIC_BATCHER_H_
#define MATMUL_SERVER_DYNAMIC_BATCHER_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace matmul {

struct BatcherOptions {
  int max_batch_size = 8;
  absl::Duration max_queue_delay = absl::Microseconds(500);
  int max_queue_size = 1024;  // queued items over all keys
};

template <typename Item>
class DynamicBatcher {
 public:
  using RunBatch =
      std::function<void(const std::string& key, std::vector<Item> batch)>;

  DynamicBatcher(const BatcherOptions& options, RunBatch run_batch)
      : options_(options), run_batch_(std::move(run_batch)) {
    dispatcher_ = std::thread([this] { DispatchLoop(); });
  }
  ~DynamicBatcher() { Shutdown(); }

  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // RESOURCE_EXHAUSTED when the queues are full, UNAVAILABLE after
  // Shutdown; the item is dropped then.
  absl::Status Enqueue(const std::string& key, Item item) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the batcher is stopping");
    if (queued_ >= options_.max_queue_size) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the queue is full (", options_.max_queue_size,
                       " requests waiting); retry later"));
    }
    queues_[key].push_back({absl::Now(), std::move(item)});
    ++queued_;
    wake_ = true;  // a batch may be full, or a new deadline the earliest
    return absl::OkStatus();
  }

  int queued() const {
    absl::MutexLock lock(&mu_);
    return queued_;
  }

  // Dispatches what is queued (without waiting for the delay) and stops.
  // Idempotent.
  void Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      stopping_ = true;
      wake_ = true;
    }
    dispatcher_.join();
  }

 private:
  struct Queued {
    absl::Time enqueued;
    Item item;
  };

  // The key whose batch should close now, with the time the next one will
  // be due when none is (absl::InfiniteFuture() when all queues are empty).
  std::pair<const std::string*, absl::Time> Due(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string* oldest_key = nullptr;
    absl::Time oldest = absl::InfiniteFuture();
    for (const auto& [key, queue] : queues_) {
      if (queue.empty()) continue;
      if (static_cast<int>(queue.size()) >= options_.max_batch_size) {
        return {&key, now};
      }
      if (queue.front().enqueued < oldest) {
        oldest = queue.front().enqueued;
        oldest_key = &key;
      }
    }
    if (oldest_key == nullptr) return {nullptr, absl::InfiniteFuture()};
    const absl::Time due = oldest + options_.max_queue_delay;
    if (stopping_ || due <= now) return {oldest_key, now};
    return {nullptr, due};
  }

  void DispatchLoop() {
    while (true) {
      std::string key;
      std::vector<Item> batch;
      {
        absl::MutexLock lock(&mu_);
        while (true) {
          auto [due_key, next] = Due(absl::Now());
          if (due_key != nullptr) {
            key = *due_key;
            break;
          }
          if (stopping_) return;  // nothing left
          // Woken early by Enqueue or Shutdown; re-evaluate either way.
          mu_.AwaitWithDeadline(absl::Condition(&wake_), next);
          wake_ = false;
        }
        std::deque<Queued>& queue = queues_[key];
        while (!queue.empty() &&
               static_cast<int>(batch.size()) < options_.max_batch_size) {
          batch.push_back(std::move(queue.front().item));
          queue.pop_front();
        }
        if (queue.empty()) queues_.erase(key);
        queued_ -= static_cast<int>(batch.size());
      }
      run_batch_(key, std::move(batch));
    }
  }

  const BatcherOptions options_;
  const RunBatch run_batch_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::deque<Queued>> queues_
      ABSL_GUARDED_BY(mu_);
  int queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::thread dispatcher_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_DYNAMIC_BATCHER_H_
