// The selector's background tuning: a worker thread that times the keys
// Choose() met for the first time, one at a time, while the service runs
// them with a heuristic pick. It knows nothing of kernels: it calls the
// selector's tuning function for each queued key.
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_BACKGROUND_TUNER_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_BACKGROUND_TUNER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::cuda {

class BackgroundTuner {
 public:
  // Tunes one key's canonical problem (GemmSelector::Tune).
  using TuneFn = std::function<absl::Status(const GemmProblem& canonical)>;
  // Called around each key the worker times; what it returns is held for
  // the timing (see GemmSelector::SetTuningGuard).
  using GuardFn = std::function<std::shared_ptr<void>()>;

  // Starts the worker, which makes `device` current on its thread. At most
  // `max_queued` keys wait for it (GemmSelector::Create refuses fewer than
  // one).
  BackgroundTuner(int device, int max_queued, TuneFn tune);
  // Stops the worker: queued keys are dropped, an in-flight one finishes.
  ~BackgroundTuner();
  BackgroundTuner(const BackgroundTuner&) = delete;
  BackgroundTuner& operator=(const BackgroundTuner&) = delete;

  // Queues `canonical` under `key` unless that key is already queued or
  // being timed. Returns whether the key is queued or being timed now:
  // false when the queue is full (or the tuner stopping).
  bool Enqueue(const std::string& key, const GemmProblem& canonical);

  // Blocks until the queue is empty and the worker idle.
  void WaitUntilIdle();

  void SetGuard(GuardFn guard);

  struct Counts {
    int64_t succeeded = 0;
    int64_t failed = 0;
  };
  Counts counts() const;

 private:
  void WorkerLoop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || worker_exited_ || (queue_.empty() && !busy_);
  }

  const int device_;
  const size_t max_queued_;
  const TuneFn tune_;

  mutable absl::Mutex mu_;
  std::deque<std::pair<std::string, GemmProblem>> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> queued_keys_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool worker_exited_ ABSL_GUARDED_BY(mu_) = false;
  GuardFn guard_ ABSL_GUARDED_BY(mu_);
  int64_t succeeded_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread worker_;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_BACKGROUND_TUNER_H_
