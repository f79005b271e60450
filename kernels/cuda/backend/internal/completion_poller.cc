#include "kernels/cuda/backend/internal/completion_poller.h"

#include <chrono>
#include <utility>

#include "absl/time/clock.h"
#include "common/request_ring_layout.h"

namespace matmul::cuda {

CompletionPoller::CompletionPoller(const CompletionPollerOptions& options,
                                   absl::AnyInvocable<void() &&> on_start)
    : options_(options), spin_(options.idle_spin) {
  thread_ = std::thread([this, on_start = std::move(on_start)]() mutable {
    if (on_start) std::move(on_start)();
    Loop();
  });
}

CompletionPoller::~CompletionPoller() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    added_.Signal();
  }
  incoming_hint_.store(true, std::memory_order_release);
  thread_.join();
}

void CompletionPoller::Add(Launch launch) {
  const absl::Time now = absl::Now();
  spin_.Arrived(now);
  absl::MutexLock lock(&mu_);
  incoming_.push_back({std::move(launch), now});
  ++pending_;
  incoming_hint_.store(true, std::memory_order_release);
  if (sleeping_) added_.Signal();
}

void CompletionPoller::SpinIdle() {
  const absl::Time now = absl::Now();
  const absl::Time until = spin_.SpinUntil(now);
  while (!incoming_hint_.load(std::memory_order_acquire) &&
         absl::Now() < until) {
    for (int i = 0; i < 64; ++i) ring::CpuRelax();
  }
}

bool CompletionPoller::TakeNew(std::vector<Watched>& watched) {
  if (watched.empty()) SpinIdle();
  absl::MutexLock lock(&mu_);
  while (watched.empty() && incoming_.empty() && !stopping_) {
    sleeping_ = true;
    added_.Wait(&mu_);
    sleeping_ = false;
  }
  for (Watched& w : incoming_) watched.push_back(std::move(w));
  incoming_.clear();
  incoming_hint_.store(false, std::memory_order_release);
  return !(watched.empty() && stopping_);
}

void CompletionPoller::Loop() {
  using Clock = std::chrono::steady_clock;
  std::vector<Watched> watched;
  while (TakeNew(watched)) {
    const absl::Time now = absl::Now();
    bool any_young = false;
    int completed = 0;
    Clock::duration polling{};
    Clock::duration completing{};
    for (size_t i = 0; i < watched.size();) {
      const Clock::time_point asked = Clock::now();
      const bool ready = watched[i].launch.ready();
      const Clock::time_point answered = Clock::now();
      polling += answered - asked;
      if (ready) {
        std::move(watched[i].launch.complete)();
        completing += Clock::now() - answered;
        watched[i] = std::move(watched.back());
        watched.pop_back();
        ++completed;
        continue;
      }
      any_young |= now - watched[i].added < options_.busy_spin;
      ++i;
    }
    polling_ns_.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(polling).count(),
        std::memory_order_relaxed);
    if (completed > 0) {
      completing_ns_.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(completing)
              .count(),
          std::memory_order_relaxed);
      absl::MutexLock lock(&mu_);
      pending_ -= completed;
    }
    if (watched.empty()) continue;
    if (any_young || incoming_hint_.load(std::memory_order_acquire)) {
      ring::CpuRelax();
    } else {
      absl::SleepFor(options_.slow_poll);
    }
  }
}

}  // namespace matmul::cuda
