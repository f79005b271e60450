#include "tests/soak/rss_watch.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace matmul::soak {
namespace {

std::string Megabytes(double bytes) {
  return absl::StrFormat("%.1f MB", bytes / 1e6);
}

std::string Percent(double fraction) {
  return absl::StrFormat("%.1f%%", 100 * fraction);
}

}  // namespace

bool AbslParseFlag(absl::string_view text, Fraction* fraction,
                   std::string* error) {
  text = absl::StripAsciiWhitespace(text);
  const bool percent = absl::ConsumeSuffix(&text, "%");
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || value < 0) {
    *error = "expected a fraction such as 0.05 or 5%";
    return false;
  }
  fraction->value = percent ? value / 100 : value;
  return true;
}

std::string AbslUnparseFlag(Fraction fraction) {
  return absl::StrCat(100 * fraction.value, "%");
}

std::optional<double> WindowMean(absl::Span<const RssSample> samples,
                                 absl::Duration from, absl::Duration to) {
  double sum = 0;
  int count = 0;
  for (const RssSample& sample : samples) {
    if (sample.at < from || sample.at >= to) continue;
    sum += static_cast<double>(sample.bytes);
    ++count;
  }
  if (count == 0) return std::nullopt;
  return sum / count;
}

std::optional<double> SlopePerMinute(absl::Span<const RssSample> samples) {
  if (samples.size() < 2) return std::nullopt;
  double mean_x = 0, mean_y = 0;
  for (const RssSample& sample : samples) {
    mean_x += absl::ToDoubleMinutes(sample.at);
    mean_y += static_cast<double>(sample.bytes);
  }
  mean_x /= static_cast<double>(samples.size());
  mean_y /= static_cast<double>(samples.size());
  double sxy = 0, sxx = 0;
  for (const RssSample& sample : samples) {
    const double dx = absl::ToDoubleMinutes(sample.at) - mean_x;
    sxy += dx * (static_cast<double>(sample.bytes) - mean_y);
    sxx += dx * dx;
  }
  if (sxx <= 0) return std::nullopt;
  return sxy / sxx;
}

absl::Duration GrowthWindow(const RssRules& rules, absl::Duration load) {
  const absl::Duration warmup = load * rules.warmup_fraction;
  return std::min(rules.max_window, (load - warmup) / 10);
}

RssFigures JudgeRss(const RssRules& rules, std::optional<int64_t> start,
                    absl::Span<const RssSample> during, absl::Duration load,
                    std::optional<int64_t> after_load,
                    absl::Duration after_load_wait) {
  RssFigures f;
  f.start = start;
  f.load = load;
  f.warmup = load * rules.warmup_fraction;
  f.window = GrowthWindow(rules, load);
  f.samples = static_cast<int>(during.size());
  f.after_load = after_load;
  f.after_load_wait = after_load_wait;
  auto see_peak = [&f](std::optional<int64_t> bytes) {
    if (bytes.has_value()) f.peak = std::max(f.peak.value_or(0), *bytes);
  };
  see_peak(start);
  for (const RssSample& sample : during) see_peak(sample.bytes);
  see_peak(after_load);

  // Growth after the warm-up.
  std::vector<RssSample> post;
  for (const RssSample& sample : during) {
    if (sample.at >= f.warmup) post.push_back(sample);
  }
  f.post_warmup_samples = static_cast<int>(post.size());
  if (post.size() < 2) {
    f.notes.push_back(absl::StrCat(
        "growth not judged: ", post.size(), " RSS samples after the warm-up (",
        absl::FormatDuration(f.warmup), "); two are needed"));
  } else {
    const absl::Duration first_end = f.warmup + f.window;
    const absl::Duration last_start = load - f.window;
    for (const RssSample& sample : post) {
      if (sample.at < first_end) ++f.first_window_samples;
      if (sample.at >= last_start) ++f.last_window_samples;
    }
    f.first_window_mean = WindowMean(post, f.warmup, first_end);
    if (!f.first_window_mean.has_value()) {
      f.first_window_mean = static_cast<double>(post.front().bytes);
      f.first_window_samples = 1;
    }
    f.last_window_mean = WindowMean(post, last_start, absl::InfiniteDuration());
    if (!f.last_window_mean.has_value()) {
      f.last_window_mean = static_cast<double>(post.back().bytes);
      f.last_window_samples = 1;
    }
    f.slope_bytes_per_minute = SlopePerMinute(post);
    if (*f.first_window_mean > 0) {
      f.growth =
          (*f.last_window_mean - *f.first_window_mean) / *f.first_window_mean;
      if (*f.growth > rules.max_growth) {
        f.failures.push_back(absl::StrCat(
            "RSS grew ", Percent(*f.growth), " after the warm-up (",
            Megabytes(*f.first_window_mean), " in the first window, ",
            Megabytes(*f.last_window_mean), " in the last, slope ",
            Megabytes(f.slope_bytes_per_minute.value_or(0)),
            "/min); the bound is ", Percent(rules.max_growth)));
      }
    } else {
      f.notes.push_back("growth not judged: the first window's RSS is 0");
    }
  }

  // After the load.
  if (!start.has_value() || *start <= 0 || !after_load.has_value()) {
    f.notes.push_back(absl::StrCat(
        "after-load RSS not judged: no ",
        !after_load.has_value() ? "sample after the load" : "start sample"));
  } else {
    f.after_load_ratio =
        static_cast<double>(*after_load) / static_cast<double>(*start);
    if (*f.after_load_ratio > 1 + rules.max_after_load) {
      f.failures.push_back(absl::StrCat(
          "RSS ", absl::FormatDuration(after_load_wait), " after the load is ",
          Megabytes(static_cast<double>(*after_load)), ", ",
          Percent(*f.after_load_ratio - 1), " above the start (",
          Megabytes(static_cast<double>(*start)), "); the bound is ",
          Percent(rules.max_after_load)));
    }
  }
  return f;
}

}  // namespace matmul::soak
