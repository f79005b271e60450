// The results of `matmul-cli bench`: a table for the terminal, CSV, and
// JSON (`--save`), which tools/plot_bench.py charts and
// tools/benchmarks_page.py tabulates: its field names are their input.
#ifndef MATMUL_CLIENT_BENCH_BENCH_REPORT_H_
#define MATMUL_CLIENT_BENCH_BENCH_REPORT_H_

#include <string>
#include <vector>

#include "client/bench/load_generator.h"

namespace matmul::bench {

// One sweep over concurrency levels against one daemon configuration.
struct BenchRun {
  std::string label;  // names the run in reports, e.g. "batching on"
  std::string shape;  // "16x4096x4096:NT"
  std::string mode;   // inline | shm | ipc | vmm, "ipc rings 2" with --rings
  double flops_per_request = 0;
  std::vector<LevelResult> levels;
};

// Aligned columns: concurrency, req/s, TFLOPS, latency percentiles (ms),
// mean batch size, server queue / kernel medians and e2e - kernel (us).
std::string FormatTable(const BenchRun& run);
std::string ToCsv(const BenchRun& run);
std::string ToJson(const BenchRun& run);

}  // namespace matmul::bench

#endif  // MATMUL_CLIENT_BENCH_BENCH_REPORT_H_
