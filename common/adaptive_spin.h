// How long a thread that has run out of work (a batcher's worker, a request
// ring's poller) polls for more before it sleeps. Polling takes the next
// request without a wake-up (tens of microseconds on some hosts) but keeps
// a core busy; it pays only while requests keep coming closer together
// than the spin. So the spin follows the recent gaps between arrivals:
// twice their running average, up to `max`, and none at all while they
// are longer than `max` (or once nothing has come for longer than that):
// a daemon under load answers at once, an idle one sleeps.
//
//   AdaptiveSpin spin(absl::Milliseconds(1));
//   spin.Arrived(absl::Now());                 // as each request comes
//   const absl::Time until = spin.SpinUntil(absl::Now());  // out of work
//
// Thread-safe: arrivals and readers may be on different threads; the
// estimate is a hint, and a stale read only spins a little more or less.
#ifndef MATMUL_COMMON_ADAPTIVE_SPIN_H_
#define MATMUL_COMMON_ADAPTIVE_SPIN_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace matmul {

class AdaptiveSpin {
 public:
  explicit AdaptiveSpin(absl::Duration max)
      : max_ns_(std::max<int64_t>(0, absl::ToInt64Nanoseconds(max))),
        average_ns_(2 * max_ns_ + 1) {}

  // A request arrived at `now`.
  void Arrived(absl::Time now) {
    const int64_t now_ns = absl::ToUnixNanos(now);
    const int64_t last = last_ns_.exchange(now_ns, std::memory_order_relaxed);
    if (last == 0) return;
    // Gaps beyond the cap weigh as the cap: one long pause must not take
    // many short gaps to forget.
    const int64_t gap = std::clamp<int64_t>(now_ns - last, 0, 2 * max_ns_ + 1);
    const int64_t average = average_ns_.load(std::memory_order_relaxed);
    average_ns_.store(average + (gap - average) / 4, std::memory_order_relaxed);
  }

  // Until when a thread that ran out of work at `now` should poll.
  absl::Time SpinUntil(absl::Time now) const {
    const int64_t average = average_ns_.load(std::memory_order_relaxed);
    const int64_t last = last_ns_.load(std::memory_order_relaxed);
    if (max_ns_ == 0 || last == 0 || average > max_ns_) return now;
    // Past the end of the window that the arrivals so far suggest: the
    // load has stopped.
    const int64_t spin = std::min(2 * average + kMinSpinNs, max_ns_);
    const absl::Time until =
        absl::FromUnixNanos(last) + absl::Nanoseconds(max_ns_);
    return std::max(now, std::min(now + absl::Nanoseconds(spin), until));
  }

  absl::Duration max() const { return absl::Nanoseconds(max_ns_); }

 private:
  // Covers the jitter of gaps of a few microseconds.
  static constexpr int64_t kMinSpinNs = 20'000;

  const int64_t max_ns_;
  std::atomic<int64_t> last_ns_{0};
  // Starts above the cap: no spin until arrivals have shown short gaps.
  std::atomic<int64_t> average_ns_;
};

}  // namespace matmul

#endif  // MATMUL_COMMON_ADAPTIVE_SPIN_H_
