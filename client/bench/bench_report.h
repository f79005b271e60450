// The results of `matmul-cli bench`: a table for the terminal, CSV, JSON
// (which can be read back, so that runs against differently configured
// daemons can be charted together), and a latency/throughput PNG chart.
#ifndef MATMUL_CLIENT_BENCH_BENCH_REPORT_H_
#define MATMUL_CLIENT_BENCH_BENCH_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/bench/load_generator.h"

namespace matmul::bench {

// One sweep over concurrency levels against one daemon configuration.
struct BenchRun {
  std::string label;  // the chart's series name, e.g. "batching on"
  std::string shape;  // "16x4096x4096:NT"
  std::string mode;   // inline | shm | ipc | vmm
  double flops_per_request = 0;
  std::vector<LevelResult> levels;
};

// Aligned columns: concurrency, req/s, TFLOPS, latency percentiles (ms),
// mean batch size, server queue / kernel medians and e2e - kernel (us).
std::string FormatTable(const BenchRun& run);
std::string ToCsv(const BenchRun& run);
std::string ToJson(const BenchRun& run);
// INVALID_ARGUMENT naming what is missing when `json` is not a BenchRun.
absl::StatusOr<BenchRun> FromJson(const std::string& json);

// p99 (solid) and p50 (dashed) latency against throughput, one colour per
// run, each point labelled with its concurrency; log latency axis.
absl::Status PlotRuns(const std::vector<BenchRun>& runs,
                      const std::string& path);

}  // namespace matmul::bench

#endif  // MATMUL_CLIENT_BENCH_BENCH_REPORT_H_
