// Worker threads in front of the compute backend, fed by a DynamicBatcher:
// each worker takes the next due batch, runs it with `run_batch`, and asks
// again. An item that would run alone at once anyway may instead run on
// its submitter's thread (TryRunHere). Admission is the batcher's (immediate
// RESOURCE_EXHAUSTED when the queue is full). Shutdown stops admission, runs
// everything already accepted and joins the workers, so every accepted request
// gets its answer.
#ifndef MATMUL_SERVER_EXECUTION_EXECUTOR_H_
#define MATMUL_SERVER_EXECUTION_EXECUTOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/execution/dynamic_batcher.h"
#include "server/execution/fine_timer_slack.h"
#include "server/execution/launch_hold.h"

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
  // arrival order) and the batch's LaunchHold, to be given back (or
  // destroyed) once its launch is complete; concurrently from several
  // workers.
  using RunBatch =
      std::function<void(std::vector<Item> batch, LaunchHold hold)>;

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

  // Runs `item` on the calling thread, as a batch of one, when a worker
  // would have taken it alone at once anyway: batches wait for no one
  // (max_queue_delay 0), nothing is queued, fewer batches run than there
  // are workers, and `key` (as for Submit) is below its launch bound. That
  // saves handing it to a worker (a wake-up there) and the worker's answer
  // back. Returns false, with `item` untouched, when it did not run (Submit it
  // then), and after Shutdown. A batch run here counts as a running batch, so
  // callers' threads take at most worker_threads at once.
  bool TryRunHere(const std::string& key, Item& item, int max_batch = 0) {
    if (batches_wait_) return false;
    std::optional<typename DynamicBatcher<Item>::Batch> batch;
    {
      absl::MutexLock lock(&mu_);
      if (shut_down_ || batches_running_ >= worker_threads_) return false;
      batch = batcher_.TakeAlone(key, item, max_batch);
      if (!batch) return false;
      ++batches_running_;
      ++running_;
    }
    run_batch_(std::move(batch->items), std::move(batch->hold));
    absl::MutexLock lock(&mu_);
    --batches_running_;
    --running_;
    return true;
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
    {
      absl::MutexLock lock(&mu_);
      shut_down_ = true;
    }
    batcher_.Shutdown();
    absl::MutexLock lock(&join_mu_);
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
    // Launches still completing give their holds back to the batcher.
    batcher_.AwaitHoldsGivenBack();
  }

 private:
  Executor(const ExecutorOptions& options, RunBatch run_batch)
      : batcher_(options.batching),
        run_batch_(std::move(run_batch)),
        worker_threads_(options.worker_threads),
        batches_wait_(options.batching.max_queue_delay > absl::ZeroDuration()) {
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
        ++batches_running_;
      }
      run_batch_(std::move(batch->items), std::move(batch->hold));
      absl::MutexLock lock(&mu_);
      running_ -= size;
      --batches_running_;
    }
  }

  DynamicBatcher<Item> batcher_;
  const RunBatch run_batch_;
  const int worker_threads_;
  // A positive max_queue_delay: an idle worker waits for fuller batches,
  // so no item runs alone on its caller's thread.
  const bool batches_wait_;
  mutable absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  // On workers and on callers' threads (TryRunHere).
  int batches_running_ ABSL_GUARDED_BY(mu_) = 0;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // serialises Shutdown's joins
  std::vector<std::thread> workers_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTION_EXECUTOR_H_
