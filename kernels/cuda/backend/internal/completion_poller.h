// Watches launches that are queued on the GPU until each is complete, on a
// thread of its own, and then runs its completion there: the thread that
// launched a product goes on to launch the next one instead of waiting
// for this one (CudaBackend::StartBatch).
//
// The thread polls every pending launch's ready() in turn, with no sleep
// while any is younger than `busy_spin`: a product's end is noticed within
// a poll round, not a wake-up later. Launches pending longer (a product
// behind a client's stream that does not get there) are polled every
// `slow_poll`. With nothing pending the thread polls for new launches as
// long as AdaptiveSpin says the recent gaps between them suggest, then
// sleeps until Add wakes it.
//
// CUDA-free: ready() and complete() do the CUDA calls; `on_start` runs
// first on the thread (to make the backend's device current).
#ifndef MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_COMPLETION_POLLER_H_
#define MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_COMPLETION_POLLER_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/adaptive_spin.h"

namespace matmul::cuda {

struct CompletionPollerOptions {
  // How long an idle poller polls for new launches before it sleeps, at
  // most (AdaptiveSpin); 0: sleep at once.
  absl::Duration idle_spin = absl::Milliseconds(1);
  // Launches younger than this are polled back to back.
  absl::Duration busy_spin = absl::Milliseconds(2);
  // The poll period of older ones.
  absl::Duration slow_poll = absl::Microseconds(50);
};

class CompletionPoller {
 public:
  struct Launch {
    // Cheap and non-blocking (an event or stream query); called on the
    // poller thread until it returns true.
    absl::AnyInvocable<bool()> ready;
    // Runs once, on the poller thread, after ready() returned true.
    absl::AnyInvocable<void() &&> complete;
  };

  CompletionPoller(const CompletionPollerOptions& options,
                   absl::AnyInvocable<void() &&> on_start = nullptr);
  // Waits for every pending launch to complete, then joins the thread.
  ~CompletionPoller();

  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;

  void Add(Launch launch);

  // Launches added and not yet completed.
  int pending() const {
    absl::MutexLock lock(&mu_);
    return pending_;
  }

  // The thread's time so far in ready() and in complete(): their rates
  // near 1 together mean the thread is saturated (a launch's end then
  // waits for the thread, not for the GPU).
  struct BusyTime {
    absl::Duration polling;
    absl::Duration completing;
  };
  BusyTime busy() const {
    return {absl::Nanoseconds(polling_ns_.load(std::memory_order_relaxed)),
            absl::Nanoseconds(completing_ns_.load(std::memory_order_relaxed))};
  }

 private:
  struct Watched {
    Launch launch;
    absl::Time added;
  };

  void Loop();
  // Moves what Add queued into `watched`; false once stopping and nothing
  // is left anywhere. Sleeps (after the idle spin) while there is nothing.
  bool TakeNew(std::vector<Watched>& watched);
  // Polls until something is queued, the spin ends or the poller stops.
  void SpinIdle();

  const CompletionPollerOptions options_;
  AdaptiveSpin spin_;
  mutable absl::Mutex mu_;
  absl::CondVar added_;
  std::vector<Watched> incoming_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool sleeping_ ABSL_GUARDED_BY(mu_) = false;
  // What the idle spin reads without the lock.
  std::atomic<bool> incoming_hint_{false};
  // busy(), written by the thread once per round.
  std::atomic<int64_t> polling_ns_{0};
  std::atomic<int64_t> completing_ns_{0};
  std::thread thread_;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_COMPLETION_POLLER_H_
