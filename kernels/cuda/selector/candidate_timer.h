// Times GEMM launches with CUDA events: the one way the selector, and the
// tools beside it (matmul-bench through the selector, cublaslt-survey
// directly), measure a kernel. Each timed launch sits between an event pair
// on one stream; the host waits once, after everything is queued, so no
// event pair spans a host round trip.
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_CANDIDATE_TIMER_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_CANDIDATE_TIMER_H_

#include <cuda_runtime_api.h>

#include <functional>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/runtime/cuda_resources.h"

namespace matmul::cuda {

// Queues one run of a candidate on the stream.
using TimedLaunch = std::function<absl::Status(cudaStream_t stream)>;

// How long to time a candidate: at least min_iterations timed runs, more up
// to max_iterations while under target_seconds of device time.
struct TimingEffort {
  int warmup_iterations = 3;
  int min_iterations = 10;
  int max_iterations = 100;
  double target_seconds = 0.025;
};

// Median (the mean of the middle two for an even count), minimum and
// maximum of per-run times.
struct RunTimes {
  double median_seconds = 0.0;
  double min_seconds = 0.0;
  double max_seconds = 0.0;
  int iterations = 0;
};
RunTimes Summarize(std::vector<double> seconds);

class CandidateTimer {
 public:
  // Times on `stream`, which must outlive the timer.
  explicit CandidateTimer(cudaStream_t stream) : stream_(stream) {}

  // The selector's measure: warmup_iterations untimed runs, three runs
  // whose time sets the count of timed runs (within `effort`), then those.
  // Per-run seconds; an error when a launch or an event fails.
  absl::StatusOr<std::vector<double>> TimeAdaptive(const TimedLaunch& launch,
                                                   const TimingEffort& effort);

  // `warmup` untimed runs, then `runs` timed ones back to back.
  absl::StatusOr<std::vector<double>> TimeBurst(const TimedLaunch& launch,
                                                int warmup, int runs);

  // `rounds` rounds of one timed run of each launch, all queued before a
  // single wait, so that they see the same clocks. With `shuffler` each
  // round runs them in a fresh random order, otherwise in the given one.
  // Per-launch seconds, in `launches` order.
  absl::StatusOr<std::vector<std::vector<double>>> TimeInterleaved(
      const std::vector<TimedLaunch>& launches, int rounds,
      std::mt19937* shuffler);

 private:
  // At least `count` events in events_.
  absl::Status ReserveEvents(size_t count);
  // Seconds between events_[2 * i] and events_[2 * i + 1] for i < count.
  absl::StatusOr<std::vector<double>> PairSeconds(size_t first, size_t count);

  cudaStream_t stream_;
  std::vector<CudaEvent> events_;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_CANDIDATE_TIMER_H_
