#include "kernels/cuda/selector/candidate_timer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "common/status_macros.h"
#include "kernels/cuda/runtime/cuda_status.h"

namespace matmul::cuda {

RunTimes Summarize(std::vector<double> seconds) {
  RunTimes times;
  if (seconds.empty()) return times;
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  times.iterations = static_cast<int>(n);
  times.min_seconds = seconds.front();
  times.max_seconds = seconds.back();
  times.median_seconds =
      n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  return times;
}

absl::Status CandidateTimer::ReserveEvents(size_t count) {
  while (events_.size() < count) {
    ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create());
    events_.push_back(std::move(event));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CandidateTimer::PairSeconds(size_t first,
                                                                size_t count) {
  std::vector<double> seconds(count);
  for (size_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(seconds[i],
                     CudaEvent::ElapsedSeconds(events_[first + 2 * i],
                                               events_[first + 2 * i + 1]));
  }
  return seconds;
}

absl::StatusOr<std::vector<double>> CandidateTimer::TimeAdaptive(
    const TimedLaunch& launch, const TimingEffort& effort) {
  RETURN_IF_ERROR(ReserveEvents(2 * effort.max_iterations + 2));
  // Warm-up, then a rough estimate that sets the iteration count.
  for (int i = 0; i < effort.warmup_iterations; ++i) {
    RETURN_IF_ERROR(launch(stream_));
  }
  RETURN_IF_ERROR(events_[0].Record(stream_));
  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(launch(stream_));
  RETURN_IF_ERROR(events_[1].Record(stream_));
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  ASSIGN_OR_RETURN(double estimate,
                   CudaEvent::ElapsedSeconds(events_[0], events_[1]));
  estimate = std::max(estimate / 3, 1e-7);
  const int iterations = static_cast<int>(
      std::clamp<double>(std::ceil(effort.target_seconds / estimate),
                         effort.min_iterations, effort.max_iterations));
  for (int i = 0; i < iterations; ++i) {
    RETURN_IF_ERROR(events_[2 + 2 * i].Record(stream_));
    RETURN_IF_ERROR(launch(stream_));
    RETURN_IF_ERROR(events_[3 + 2 * i].Record(stream_));
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  return PairSeconds(2, iterations);
}

absl::StatusOr<std::vector<double>> CandidateTimer::TimeBurst(
    const TimedLaunch& launch, int warmup, int runs) {
  RETURN_IF_ERROR(ReserveEvents(2 * runs));
  for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(launch(stream_));
  for (int i = 0; i < runs; ++i) {
    RETURN_IF_ERROR(events_[2 * i].Record(stream_));
    RETURN_IF_ERROR(launch(stream_));
    RETURN_IF_ERROR(events_[2 * i + 1].Record(stream_));
  }
  RETURN_IF_ERROR(events_[2 * runs - 1].Synchronize());
  return PairSeconds(0, runs);
}

absl::StatusOr<std::vector<std::vector<double>>>
CandidateTimer::TimeInterleaved(const std::vector<TimedLaunch>& launches,
                                int rounds, std::mt19937* shuffler) {
  std::vector<std::vector<double>> seconds(launches.size());
  if (launches.empty() || rounds <= 0) return seconds;
  const size_t queued = launches.size() * rounds;
  RETURN_IF_ERROR(ReserveEvents(2 * queued));
  std::vector<size_t> order(launches.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Launch c's run in round r sits between events 2 * (r * n + c) and the
  // one after it, whatever the order it ran in.
  const size_t n = launches.size();
  for (int r = 0; r < rounds; ++r) {
    // A fresh random order each round: a kernel's time depends a little on
    // what ran just before it (clocks, power), and any fixed or cyclic
    // order hands that bias to some launch.
    if (shuffler != nullptr)
      std::shuffle(order.begin(), order.end(), *shuffler);
    for (const size_t c : order) {
      const size_t slot = 2 * (r * n + c);
      RETURN_IF_ERROR(events_[slot].Record(stream_));
      RETURN_IF_ERROR(launches[c](stream_));
      RETURN_IF_ERROR(events_[slot + 1].Record(stream_));
    }
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < n; ++c) {
      const size_t slot = 2 * (r * n + c);
      ASSIGN_OR_RETURN(double s, CudaEvent::ElapsedSeconds(events_[slot],
                                                           events_[slot + 1]));
      seconds[c].push_back(s);
    }
  }
  return seconds;
}

}  // namespace matmul::cuda
