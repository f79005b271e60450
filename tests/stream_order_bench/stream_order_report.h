// stream-order-bench's results per shape and their report: a table on
// stdout (TFLOP/s of the daemon's stream-ordered products and of cuBLASLt
// in this process, their ratio against issue 21's target) and JSON.
#ifndef MATMUL_TESTS_STREAM_ORDER_BENCH_STREAM_ORDER_REPORT_H_
#define MATMUL_TESTS_STREAM_ORDER_BENCH_STREAM_ORDER_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace matmul::stream_order_bench {

struct ShapeResult {
  std::string shape;  // "MxNxK"
  double flops = 0;   // of one product
  int products = 0;   // per burst
  // One burst per repetition, in the order they ran (the two interleaved).
  std::vector<double> daemon_seconds;
  std::vector<double> cublaslt_seconds;
  // The kernel the daemon named for a plain product of this shape, and its
  // kernel time there.
  std::string daemon_kernel;
  double daemon_kernel_seconds = 0;
  int cublaslt_algo_id = -1;
  int cublaslt_algo_index = -1;
  int cublaslt_candidates = 0;
  // Relative norm error of one stream-ordered product against cuBLASLt's.
  std::optional<double> check_error;
  // Not OK: the shape could not be measured (or its check failed).
  absl::Status status;
};

// Issue 21's least daemon/cuBLASLt ratio for `shape`, when it sets one.
std::optional<double> TargetRatio(const std::string& shape);

// Prints the table (and each shape's error) to stdout.
void PrintTable(const std::vector<ShapeResult>& results,
                const std::string& device, int repetitions);

// Everything, with each burst's time.
nlohmann::json ToJson(const std::vector<ShapeResult>& results,
                      const std::string& device, int repetitions);

}  // namespace matmul::stream_order_bench

#endif  // MATMUL_TESTS_STREAM_ORDER_BENCH_STREAM_ORDER_REPORT_H_
