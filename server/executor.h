// Worker threads in front of the compute backend, fed by a DynamicBatcher:
// each worker takes the next due batch, runs it with `run_batch`, and asks
// again. Admission is the batcher's (immediate RESOURCE_EXHAUSTED when the
// queue is full). Shutdown stops admission, runs everything already
// accepted and joins the workers, so every accepted request gets its
// answer.
#ifndef MATMUL_SERVER_EXECUTOR_H_
#define MATMUL_SERVER_EXECUTOR_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/dynamic_batcher.h"
#include "server/fine_timer_slack.h"

namespace matmul {

struct ExecutorOptions {
  // Batches running at once (each worker runs one at a time).
  int worker_threads = 2;
  BatcherOptions batching;
};

template <typename Item>
class Executor {
 public:
  // Called on a worker thread with the items of one batch (one batch key,
  // arrival order); concurrently from several workers.
  using RunBatch = std::function<void(std::vector<Item> batch)>;

  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const ExecutorOptions& options, RunBatch run_batch) {
    if (options.worker_threads < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "worker_threads is ", options.worker_threads, "; expected >= 1"));
    }
    if (absl::Status status = CheckBatcherOptions(options.batching);
        !status.ok()) {
      return status;
    }
    return std::unique_ptr<Executor>(
        new Executor(options, std::move(run_batch)));
  }
  ~Executor() { Shutdown(); }

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Queues `item` under `key` (see DynamicBatcher::Enqueue: moved from only
  // when accepted). Refusals: RESOURCE_EXHAUSTED when the queue is full,
  // UNAVAILABLE after Shutdown.
  absl::Status Submit(const std::string& key, Item&& item, int max_batch = 0) {
    return batcher_.Enqueue(key, std::move(item), max_batch);
  }

  // Items waiting to run.
  int queue_depth() const { return batcher_.queued(); }
  // Items running now.
  int running() const {
    absl::MutexLock lock(&mu_);
    return running_;
  }

  // Refuses new items, runs the queued ones, joins the workers. Idempotent.
  void Shutdown() {
    batcher_.Shutdown();
    absl::MutexLock lock(&join_mu_);
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
  }

 private:
  Executor(const ExecutorOptions& options, RunBatch run_batch)
      : batcher_(options.batching), run_batch_(std::move(run_batch)) {
    for (int i = 0; i < options.worker_threads; ++i) {
      workers_.emplace_back([this] { WorkerLoop(); });
    }
  }

  void WorkerLoop() {
    UseFineTimerSlack();  // waits for batch deadlines
    while (std::optional<typename DynamicBatcher<Item>::Batch> batch =
               batcher_.Next()) {
      const int size = static_cast<int>(batch->items.size());
      {
        absl::MutexLock lock(&mu_);
        running_ += size;
      }
      run_batch_(std::move(batch->items));
      absl::MutexLock lock(&mu_);
      running_ -= size;
    }
  }

  DynamicBatcher<Item> batcher_;
  const RunBatch run_batch_;
  mutable absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Mutex join_mu_;  // serialises Shutdown's joins
  std::vector<std::thread> workers_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTOR_H_
