// A fixed pool of worker threads in front of the compute backend, with a
// bounded queue. Admission is immediate: a full queue is RESOURCE_EXHAUSTED,
// never a wait. Shutdown stops admission, runs everything already accepted
// and joins the workers, so every accepted request gets its answer.
#ifndef MATMUL_SERVER_EXECUTOR_H_
#define MATMUL_SERVER_EXECUTOR_H_

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace matmul {

struct ExecutorOptions {
  int worker_threads = 2;
  int max_queue_size = 256;  // accepted but not yet running
};

class Executor {
 public:
  // Invoked exactly once: with OK on a worker thread when it runs, or, when
  // refused, with the reason before Submit returns.
  using Job = absl::AnyInvocable<void(absl::Status admission) &&>;

  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const ExecutorOptions& options);
  ~Executor();  // Shutdown()

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Queues `job`. Refusals: RESOURCE_EXHAUSTED when the queue is full,
  // UNAVAILABLE after Shutdown.
  void Submit(Job job);

  // Jobs waiting to run.
  int queue_depth() const;
  // Jobs running now.
  int running() const;

  // Refuses new jobs, finishes the queued ones, joins the workers. Idempotent.
  void Shutdown();

 private:
  explicit Executor(const ExecutorOptions& options);
  void WorkerLoop();

  const ExecutorOptions options_;
  mutable absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> workers_;
};

}  // namespace matmul

#endif  // MATMUL_SERVER_EXECUTOR_H_
