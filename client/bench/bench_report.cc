#include "client/bench/bench_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace matmul::bench {
namespace {

constexpr double kMs = 1e3;
constexpr double kUs = 1e6;

// Every numeric field of a level, in column order, for CSV and JSON.
struct Field {
  const char* name;
  double LevelResult::*member;
};
constexpr Field kFields[] = {
    {"request_rate", &LevelResult::request_rate},
    {"seconds", &LevelResult::seconds},
    {"requests_per_second", &LevelResult::requests_per_second},
    {"tflops", &LevelResult::tflops},
    {"latency_mean_s", &LevelResult::latency_mean},
    {"latency_p50_s", &LevelResult::latency_p50},
    {"latency_p90_s", &LevelResult::latency_p90},
    {"latency_p95_s", &LevelResult::latency_p95},
    {"latency_p99_s", &LevelResult::latency_p99},
    {"server_queue_p50_s", &LevelResult::server_queue_p50},
    {"server_kernel_p50_s", &LevelResult::server_kernel_p50},
    {"server_total_p50_s", &LevelResult::server_total_p50},
    {"overhead_p50_s", &LevelResult::overhead_p50},
    {"overhead_p99_s", &LevelResult::overhead_p99},
    {"mean_batch_size", &LevelResult::mean_batch_size},
};

}  // namespace

std::string FormatTable(const BenchRun& run) {
  std::string out = absl::StrFormat(
      "%s, %s, %s\n"
      "%5s %10s %8s %9s %9s %9s %9s %7s %9s %9s %9s %9s  %s\n",
      run.label, run.shape, run.mode, "conc", "req/s", "TFLOPS", "p50 ms",
      "p90 ms", "p95 ms", "p99 ms", "batch", "queue us", "kernel us",
      "e2e-k p50", "e2e-k p99", "kernel");
  for (const LevelResult& l : run.levels) {
    absl::StrAppendFormat(
        &out,
        "%5d %10.0f %8.2f %9.3f %9.3f %9.3f %9.3f %7.2f %9.1f %9.1f "
        "%9.1f %9.1f  %s%s\n",
        l.concurrency, l.requests_per_second, l.tflops, l.latency_p50 * kMs,
        l.latency_p90 * kMs, l.latency_p95 * kMs, l.latency_p99 * kMs,
        l.mean_batch_size, l.server_queue_p50 * kUs, l.server_kernel_p50 * kUs,
        l.overhead_p50 * kUs, l.overhead_p99 * kUs, l.kernel,
        l.stable ? ""
                 : absl::StrCat(" (unstable after ", l.windows, " windows)"));
    if (l.errors > 0) {
      absl::StrAppendFormat(&out, "      %d errors, first: %s\n", l.errors,
                            l.first_error);
    }
  }
  return out;
}

std::string ToCsv(const BenchRun& run) {
  std::string out = "label,shape,mode,concurrency";
  for (const Field& f : kFields) absl::StrAppend(&out, ",", f.name);
  absl::StrAppend(&out, ",requests,errors,windows,stable\n");
  for (const LevelResult& l : run.levels) {
    absl::StrAppend(&out, run.label, ",", run.shape, ",", run.mode, ",",
                    l.concurrency);
    for (const Field& f : kFields) {
      absl::StrAppendFormat(&out, ",%.9g", l.*(f.member));
    }
    absl::StrAppend(&out, ",", l.requests, ",", l.errors, ",", l.windows, ",",
                    l.stable ? "true" : "false", "\n");
  }
  return out;
}

std::string ToJson(const BenchRun& run) {
  nlohmann::json json = {{"label", run.label},
                         {"shape", run.shape},
                         {"mode", run.mode},
                         {"flops_per_request", run.flops_per_request}};
  json["levels"] = nlohmann::json::array();
  for (const LevelResult& l : run.levels) {
    nlohmann::json level = {
        {"concurrency", l.concurrency}, {"requests", l.requests},
        {"errors", l.errors},           {"windows", l.windows},
        {"stable", l.stable},           {"first_error", l.first_error}};
    level["kernel"] = l.kernel;
    for (const Field& f : kFields) level[f.name] = l.*(f.member);
    json["levels"].push_back(std::move(level));
  }
  return json.dump(2) + "\n";
}

}  // namespace matmul::bench
