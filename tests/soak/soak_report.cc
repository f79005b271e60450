#include "tests/soak/soak_report.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace matmul::soak {
namespace {

// Every sampled quantity is a count or a byte size: whole numbers.
std::string Text(const std::optional<double>& value) {
  return value.has_value() ? absl::StrFormat("%.0f", *value) : "n/a";
}
std::string Text(const std::optional<int64_t>& value) {
  return value.has_value() ? absl::StrCat(*value) : "n/a";
}

std::string Json(const std::optional<double>& value) {
  return value.has_value() ? absl::StrFormat("%.0f", *value) : "null";
}
std::string Json(const std::optional<int64_t>& value) {
  return value.has_value() ? absl::StrCat(*value) : "null";
}

std::string Quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string QuotedList(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& item : items) quoted.push_back(Quoted(item));
  return absl::StrCat("[", absl::StrJoin(quoted, ","), "]");
}

// The sampled quantities, in report order: name, start, end.
struct Row {
  const char* name;
  std::optional<double> start;
  std::optional<double> end;
};

template <typename T>
std::optional<double> AsDouble(const std::optional<T>& value) {
  if (!value.has_value()) return std::nullopt;
  return static_cast<double>(*value);
}

std::string Megabytes(const std::optional<double>& bytes) {
  return bytes.has_value() ? absl::StrFormat("%.1f MB", *bytes / 1e6) : "n/a";
}
std::string Megabytes(const std::optional<int64_t>& bytes) {
  return Megabytes(AsDouble(bytes));
}
std::string Percent(double fraction) {
  return absl::StrFormat("%.1f%%", 100 * fraction);
}
std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}
std::string JsonNumber(const std::optional<double>& value) {
  return value.has_value() ? absl::StrFormat("%.6g", *value) : "null";
}

// The dump as printed: at most this many lines.
constexpr size_t kDumpLines = 200;

void PrintRss(const SoakReport& r, std::ostream& out) {
  const RssFigures& f = r.rss;
  out << absl::StrFormat(
      "\nmemory: RSS every %s; warm-up %s of %s; windows of %s; bounds: "
      "growth %s, %s after the load %s above the start\n",
      Seconds(r.rss_interval), Percent(r.rss_rules.warmup_fraction),
      Seconds(f.load), Seconds(f.window), Percent(r.rss_rules.max_growth),
      Seconds(f.after_load_wait), Percent(r.rss_rules.max_after_load));
  out << absl::StrFormat("  %-20s %s\n", "start", Megabytes(f.start));
  out << absl::StrFormat("  %-20s %s\n", "peak", Megabytes(f.peak));
  out << absl::StrFormat("  %-20s %s (%d samples from %s)\n",
                         "first window mean", Megabytes(f.first_window_mean),
                         f.first_window_samples, Seconds(f.warmup));
  out << absl::StrFormat("  %-20s %s (%d samples to %s)\n", "last window mean",
                         Megabytes(f.last_window_mean), f.last_window_samples,
                         Seconds(f.load));
  out << absl::StrFormat(
      "  %-20s %s\n", "slope",
      f.slope_bytes_per_minute.has_value()
          ? absl::StrFormat("%.3f MB/min (%d samples after the warm-up, %d "
                            "in all)",
                            *f.slope_bytes_per_minute / 1e6,
                            f.post_warmup_samples, f.samples)
          : std::string("n/a"));
  out << absl::StrFormat("  %-20s %s\n", "growth",
                         f.growth.has_value() ? Percent(*f.growth) : "n/a");
  out << absl::StrFormat(
      "  %-20s %s%s\n", "after load", Megabytes(f.after_load),
      f.after_load_ratio.has_value()
          ? absl::StrFormat(" (%.3f x start)", *f.after_load_ratio)
          : "");
  for (const std::string& note : f.notes) out << "  note: " << note << "\n";
}

void PrintRequestsDump(const SoakReport& r, std::ostream& out) {
  if (!r.requests_dump_fetched) return;
  out << "\nrequests in flight after the settle (GET /debug/requests): ";
  if (!r.requests_dump_error.empty()) {
    out << "not fetched: " << r.requests_dump_error << "\n";
    return;
  }
  if (r.requests_dump.empty()) {
    out << "none listed (empty body)\n";
    return;
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(r.requests_dump, '\n', absl::SkipEmpty());
  out << lines.size() << " lines\n";
  for (size_t i = 0; i < lines.size() && i < kDumpLines; ++i) {
    out << "  " << lines[i] << "\n";
  }
  if (lines.size() > kDumpLines) {
    out << "  ... " << lines.size() - kDumpLines
        << " more (all of them in --json_out)\n";
  }
}

std::string RssJson(const SoakReport& r) {
  const RssFigures& f = r.rss;
  std::vector<std::string> series;
  series.reserve(r.rss_series.size());
  for (const RssSample& sample : r.rss_series) {
    series.push_back(absl::StrFormat(
        "[%.3f,%d]", absl::ToDoubleSeconds(sample.at), sample.bytes));
  }
  std::optional<double> slope_mb;
  if (f.slope_bytes_per_minute.has_value()) {
    slope_mb = *f.slope_bytes_per_minute / 1e6;
  }
  return absl::StrCat(
      "{\"interval_seconds\":", absl::ToDoubleSeconds(r.rss_interval),
      ",\"warmup_fraction\":", r.rss_rules.warmup_fraction,
      ",\"warmup_seconds\":", absl::ToDoubleSeconds(f.warmup),
      ",\"window_seconds\":", absl::ToDoubleSeconds(f.window),
      ",\"load_seconds\":", absl::ToDoubleSeconds(f.load),
      ",\"max_growth\":", r.rss_rules.max_growth,
      ",\"max_after_load\":", r.rss_rules.max_after_load,
      ",\"start_bytes\":", Json(f.start), ",\"peak_bytes\":", Json(f.peak),
      ",\"first_window_mean_bytes\":", JsonNumber(f.first_window_mean),
      ",\"first_window_samples\":", f.first_window_samples,
      ",\"last_window_mean_bytes\":", JsonNumber(f.last_window_mean),
      ",\"last_window_samples\":", f.last_window_samples,
      ",\"post_warmup_samples\":", f.post_warmup_samples,
      ",\"slope_mb_per_minute\":", JsonNumber(slope_mb),
      ",\"growth\":", JsonNumber(f.growth),
      ",\"after_load_bytes\":", Json(f.after_load),
      ",\"after_load_seconds\":", absl::ToDoubleSeconds(f.after_load_wait),
      ",\"after_load_ratio\":", JsonNumber(f.after_load_ratio),
      ",\"failures\":", QuotedList(f.failures),
      ",\"notes\":", QuotedList(f.notes), ",\"series\":[",
      absl::StrJoin(series, ","), "]}");
}

std::vector<Row> Rows(const SoakReport& r) {
  return {
      {"rss_bytes", AsDouble(r.start.rss_bytes), AsDouble(r.end.rss_bytes)},
      {"open_fds", AsDouble(r.start.open_fds), AsDouble(r.end.open_fds)},
      {"sessions", r.start.sessions, r.end.sessions},
      {"regions", r.start.regions, r.end.regions},
      {"region_bytes", r.start.region_bytes, r.end.region_bytes},
      {"rings", r.start.rings, r.end.rings},
      {"requests_in_flight", r.start.in_flight, r.end.in_flight},
      {"shm_mappings", AsDouble(r.start.shm_mappings),
       AsDouble(r.end.shm_mappings)},
  };
}

}  // namespace

void PrintReport(const SoakReport& r, std::ostream& out) {
  out << absl::StrFormat(
      "matmul-soak: %d clients for %.0f s against %s (seed %d)\n"
      "scenarios: %s\n",
      r.clients, r.duration_seconds, r.target, r.seed, r.scenarios);
  for (const std::string& skipped : r.skipped) {
    out << "skipped: " << skipped << "\n";
  }
  out << absl::StrFormat("\n%-16s %-22s %10s\n", "scenario", "outcome",
                         "count");
  int64_t total = 0;
  for (const auto& [key, count] : r.totals.outcomes) {
    out << absl::StrFormat("%-16s %-22s %10d\n", key.first, key.second, count);
    total += count;
  }
  out << absl::StrFormat("%-16s %-22s %10d\n\n", "all", "", total);
  out << absl::StrFormat(
      "checked products: %d   wrong results: %d   unexpected: %d   holders "
      "killed: %d\n",
      r.totals.checked_products, r.totals.wrong_results, r.totals.unexpected,
      r.holders_killed);
  out << absl::StrFormat(
      "daemon pid %d: %s; restarts (or deaths): %d\n", r.daemon_pid,
      r.daemon_pid == 0
          ? "not watched (no --daemon_pid)"
          : (r.same_process ? "same process throughout" : "DIED OR RESTARTED"),
      r.same_process ? 0 : 1);
  out << absl::StrFormat("\n%-20s %14s %14s\n", "daemon", "start",
                         absl::StrFormat("end (+%.1f s)", r.settle_seconds));
  for (const Row& row : Rows(r)) {
    out << absl::StrFormat("%-20s %14s %14s\n", row.name, Text(row.start),
                           Text(row.end));
  }
  out << absl::StrFormat("%-20s %14s %14s\n", "peak rss_bytes", "",
                         Text(r.peak_rss_bytes));
  if (!r.end.metrics_error.empty()) {
    out << "metrics: " << r.end.metrics_error << "\n";
  }
  PrintRss(r, out);
  PrintRequestsDump(r, out);
  out << absl::StrFormat(
      "\n/dev/shm entries left: by the soak %d, by killed holders %d "
      "(removed), by other processes %d\n",
      r.shm_left_by_soak.size(), r.shm_left_by_killed_holders.size(),
      r.shm_left_by_others.size());
  if (!r.totals.failures.empty()) {
    out << "\nfirst failures:\n";
    for (const std::string& failure : r.totals.failures) {
      out << "  " << failure << "\n";
    }
  }
  if (r.failures.empty()) {
    out << "\nPASS\n";
  } else {
    out << "\nFAIL:\n";
    for (const std::string& failure : r.failures)
      out << "  " << failure << "\n";
  }
}

std::string ReportJson(const SoakReport& r) {
  std::vector<std::string> outcomes;
  for (const auto& [key, count] : r.totals.outcomes) {
    outcomes.push_back(absl::StrCat("{\"scenario\":", Quoted(key.first),
                                    ",\"outcome\":", Quoted(key.second),
                                    ",\"count\":", count, "}"));
  }
  std::vector<std::string> daemon;
  for (const Row& row : Rows(r)) {
    daemon.push_back(absl::StrCat(Quoted(row.name),
                                  ":{\"start\":", Json(row.start),
                                  ",\"end\":", Json(row.end), "}"));
  }
  return absl::StrCat(
      "{\"target\":", Quoted(r.target), ",\"clients\":", r.clients,
      ",\"duration_seconds\":", r.duration_seconds,
      ",\"scenarios\":", Quoted(r.scenarios), ",\"seed\":", r.seed,
      ",\"skipped\":", QuotedList(r.skipped), ",\"outcomes\":[",
      absl::StrJoin(outcomes, ","),
      "],\"checked_products\":", r.totals.checked_products,
      ",\"wrong_results\":", r.totals.wrong_results,
      ",\"unexpected\":", r.totals.unexpected,
      ",\"holders_killed\":", r.holders_killed,
      ",\"daemon_pid\":", r.daemon_pid,
      ",\"daemon_restarts\":", r.same_process ? 0 : 1, ",\"daemon\":{",
      absl::StrJoin(daemon, ","),
      "},\"peak_rss_bytes\":", Json(r.peak_rss_bytes), ",\"rss\":", RssJson(r),
      ",\"requests_in_flight_dump\":",
      r.requests_dump_fetched && r.requests_dump_error.empty()
          ? Quoted(r.requests_dump)
          : std::string("null"),
      ",\"requests_in_flight_dump_error\":",
      r.requests_dump_error.empty() ? std::string("null")
                                    : Quoted(r.requests_dump_error),
      ",\"settle_seconds\":", r.settle_seconds, ",\"fd_slack\":", r.fd_slack,
      ",\"shm_left_by_soak\":", QuotedList(r.shm_left_by_soak),
      ",\"shm_left_by_killed_holders\":",
      QuotedList(r.shm_left_by_killed_holders),
      ",\"shm_left_by_others\":", QuotedList(r.shm_left_by_others),
      ",\"first_failures\":", QuotedList(r.totals.failures),
      ",\"failures\":", QuotedList(r.failures),
      ",\"passed\":", r.failures.empty() ? "true" : "false", "}\n");
}

}  // namespace matmul::soak
