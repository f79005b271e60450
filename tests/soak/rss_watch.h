// The soak's memory rules: the daemon's RSS, sampled at a fixed interval
// while the clients run, must not keep growing once it has warmed up, and
// must come back near its start value after the load stops.
//
//   growth: after a warm-up (a fraction of the load, 0.2 by default), the
//     mean of the samples in the last window of the load against the mean
//     of those in the first window after the warm-up. A window is a minute,
//     or a tenth of the post-warm-up span when that is shorter; a window
//     without a sample takes the one nearest to it. Fails above
//     max_growth. The least-squares slope over the same samples (bytes a
//     minute) is reported beside it: the rate a leak would have.
//   after load: one sample taken a while after the clients are gone,
//     against the sample taken before they started. Fails when it is more
//     than max_after_load above it.
//
// A rule without the samples it needs (no pid to read, fewer than two
// samples after the warm-up) is not judged; a note says why.
#ifndef MATMUL_TESTS_SOAK_RSS_WATCH_H_
#define MATMUL_TESTS_SOAK_RSS_WATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace matmul::soak {

// A flag value that is a fraction: "5%" or "0.05". Not negative.
struct Fraction {
  double value = 0;
};
bool AbslParseFlag(absl::string_view text, Fraction* fraction,
                   std::string* error);
std::string AbslUnparseFlag(Fraction fraction);

struct RssSample {
  absl::Duration at;  // since the load started
  int64_t bytes = 0;
};

struct RssRules {
  double warmup_fraction = 0.2;
  // The longest a first or last window is; a tenth of the post-warm-up
  // span when that is shorter.
  absl::Duration max_window = absl::Minutes(1);
  double max_growth = 0.05;
  double max_after_load = 0.25;
};

// The mean of the samples taken in [from, to); absent when none was.
std::optional<double> WindowMean(absl::Span<const RssSample> samples,
                                 absl::Duration from, absl::Duration to);

// The least-squares slope of bytes against time, in bytes a minute; absent
// with fewer than two samples at distinct times.
std::optional<double> SlopePerMinute(absl::Span<const RssSample> samples);

// The window JudgeRss compares for a load of `load`: the smaller of
// `rules.max_window` and a tenth of what follows the warm-up.
absl::Duration GrowthWindow(const RssRules& rules, absl::Duration load);

struct RssFigures {
  std::optional<int64_t> start;  // before the load
  // The highest of every sample: start, during the load, after it.
  std::optional<int64_t> peak;
  absl::Duration load;    // how long the load ran
  absl::Duration warmup;  // from the load's start
  absl::Duration window;  // of the first and of the last window
  int samples = 0;        // taken during the load
  int post_warmup_samples = 0;
  int first_window_samples = 0;
  int last_window_samples = 0;
  std::optional<double> first_window_mean;
  std::optional<double> last_window_mean;
  std::optional<double> slope_bytes_per_minute;
  std::optional<double> growth;  // (last - first) / first
  std::optional<int64_t> after_load;
  absl::Duration after_load_wait;          // from the end of the load
  std::optional<double> after_load_ratio;  // after_load / start

  // Why the rules fail; empty: they pass (or were not judged).
  std::vector<std::string> failures;
  // Rules not judged, and why.
  std::vector<std::string> notes;
};

// Applies `rules` to the samples: `start` before the load, `during` while
// it ran for `load` (sorted by time), `after_load` taken `after_load_wait`
// after it ended.
RssFigures JudgeRss(const RssRules& rules, std::optional<int64_t> start,
                    absl::Span<const RssSample> during, absl::Duration load,
                    std::optional<int64_t> after_load,
                    absl::Duration after_load_wait);

}  // namespace matmul::soak

#endif  // MATMUL_TESTS_SOAK_RSS_WATCH_H_
