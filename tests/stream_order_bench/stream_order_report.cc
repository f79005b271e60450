#include "tests/stream_order_bench/stream_order_report.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"

namespace matmul::stream_order_bench {
namespace {

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread SpreadOf(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median =
      n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return {median, values.front(), values.back()};
}

// TFLOP/s of each burst.
std::vector<double> Tflops(const ShapeResult& result,
                           const std::vector<double>& seconds) {
  std::vector<double> tflops;
  for (double s : seconds) {
    tflops.push_back(s > 0 ? result.flops * result.products / s * 1e-12 : 0);
  }
  return tflops;
}

// Each repetition's daemon burst over the cuBLASLt burst that followed it.
std::vector<double> PairRatios(const ShapeResult& result) {
  std::vector<double> ratios;
  const size_t n =
      std::min(result.daemon_seconds.size(), result.cublaslt_seconds.size());
  for (size_t i = 0; i < n; ++i) {
    if (result.daemon_seconds[i] > 0) {
      ratios.push_back(result.cublaslt_seconds[i] / result.daemon_seconds[i]);
    }
  }
  return ratios;
}

// The ratio of the medians; nullopt without both.
std::optional<double> Ratio(const ShapeResult& result) {
  const Spread daemon = SpreadOf(Tflops(result, result.daemon_seconds));
  const Spread lt = SpreadOf(Tflops(result, result.cublaslt_seconds));
  if (daemon.median <= 0 || lt.median <= 0) return std::nullopt;
  return daemon.median / lt.median;
}

std::string SpreadCell(const Spread& s) {
  if (s.median <= 0) return "-";
  return absl::StrFormat("%.0f (%.0f..%.0f)", s.median, s.min, s.max);
}

}  // namespace

std::optional<double> TargetRatio(const std::string& shape) {
  if (shape == "5120x11008x2048" || shape == "5120x2048x11008") return 0.95;
  if (shape == "5120x2048x2048") return 0.90;
  if (shape == "5120x512x2048") return 0.80;
  return std::nullopt;
}

void PrintTable(const std::vector<ShapeResult>& results,
                const std::string& device, int repetitions) {
  const int products = results.empty() ? 0 : results.front().products;
  std::printf(
      "\nstream-order-bench on %s: %d products back to back on one stream "
      "(no synchronize between\nthem), NT BF16, %d repetitions; TFLOP/s "
      "median (min..max) from CUDA events on the stream.\ncuBLASLt: the "
      "fastest of its heuristic top-k, in this process on the same "
      "operands.\nratio: daemon median over cuBLASLt median (min..max of "
      "each repetition's pair).\n",
      device.c_str(), products, repetitions);
  std::printf("%-16s %-20s %10s %-20s %-20s %-8s %-4s %s\n", "shape",
              "daemon TFLOP/s", "products/s", "cuBLASLt TFLOP/s", "ratio",
              "target", "met", "check");
  for (const ShapeResult& result : results) {
    const Spread daemon = SpreadOf(Tflops(result, result.daemon_seconds));
    const Spread lt = SpreadOf(Tflops(result, result.cublaslt_seconds));
    const Spread pairs = SpreadOf(PairRatios(result));
    const std::optional<double> ratio = Ratio(result);
    const std::optional<double> target = TargetRatio(result.shape);
    const std::string products_per_second =
        daemon.median > 0
            ? absl::StrFormat("%.0f", daemon.median * 1e12 / result.flops)
            : "-";
    const std::string ratio_cell =
        ratio
            ? absl::StrFormat("%.3f (%.3f..%.3f)", *ratio, pairs.min, pairs.max)
            : "-";
    const std::string target_cell =
        target ? absl::StrFormat(">=%.2f", *target) : "-";
    const std::string met = !target || !ratio   ? "-"
                            : *ratio >= *target ? "yes"
                                                : "no";
    const std::string check =
        result.check_error ? absl::StrFormat("%.1e", *result.check_error) : "-";
    std::printf("%-16s %-20s %10s %-20s %-20s %-8s %-4s %s\n",
                result.shape.c_str(), SpreadCell(daemon).c_str(),
                products_per_second.c_str(), SpreadCell(lt).c_str(),
                ratio_cell.c_str(), target_cell.c_str(), met.c_str(),
                check.c_str());
  }
  std::printf("\nKernels:\n");
  for (const ShapeResult& result : results) {
    if (result.cublaslt_candidates == 0) continue;  // failed before cuBLASLt
    std::printf(
        "%-16s daemon: %s (%.1f us in a plain product); cuBLASLt: "
        "algo %d, candidate %d of %d\n",
        result.shape.c_str(),
        result.daemon_kernel.empty() ? "-" : result.daemon_kernel.c_str(),
        result.daemon_kernel_seconds * 1e6, result.cublaslt_algo_id,
        result.cublaslt_algo_index, result.cublaslt_candidates);
  }
  for (const ShapeResult& result : results) {
    if (!result.status.ok()) {
      std::printf("%s FAILED: %s\n", result.shape.c_str(),
                  result.status.ToString().c_str());
    }
  }
}

nlohmann::json ToJson(const std::vector<ShapeResult>& results,
                      const std::string& device, int repetitions) {
  nlohmann::json out;
  out["device"] = device;
  out["repetitions"] = repetitions;
  out["shapes"] = nlohmann::json::array();
  for (const ShapeResult& result : results) {
    auto side = [&](const std::vector<double>& seconds) {
      const std::vector<double> tflops = Tflops(result, seconds);
      const Spread s = SpreadOf(tflops);
      return nlohmann::json{{"seconds", seconds},
                            {"tflops", tflops},
                            {"median_tflops", s.median},
                            {"min_tflops", s.min},
                            {"max_tflops", s.max}};
    };
    nlohmann::json entry;
    entry["shape"] = result.shape;
    entry["layout"] = "NT";
    entry["flops"] = result.flops;
    entry["products"] = result.products;
    entry["daemon"] = side(result.daemon_seconds);
    entry["daemon"]["median_products_per_second"] =
        entry["daemon"]["median_tflops"].get<double>() * 1e12 / result.flops;
    entry["daemon"]["kernel"] = result.daemon_kernel;
    entry["daemon"]["plain_kernel_seconds"] = result.daemon_kernel_seconds;
    entry["cublaslt"] = side(result.cublaslt_seconds);
    entry["cublaslt"]["algo_id"] = result.cublaslt_algo_id;
    entry["cublaslt"]["algo_index"] = result.cublaslt_algo_index;
    entry["cublaslt"]["candidates"] = result.cublaslt_candidates;
    entry["pair_ratios"] = PairRatios(result);
    const std::optional<double> ratio = Ratio(result);
    const std::optional<double> target = TargetRatio(result.shape);
    entry["ratio"] = ratio ? nlohmann::json(*ratio) : nlohmann::json();
    entry["target"] = target ? nlohmann::json(*target) : nlohmann::json();
    entry["met"] =
        ratio && target ? nlohmann::json(*ratio >= *target) : nlohmann::json();
    entry["check_error"] = result.check_error
                               ? nlohmann::json(*result.check_error)
                               : nlohmann::json();
    entry["ok"] = result.status.ok();
    if (!result.status.ok()) entry["error"] = result.status.ToString();
    out["shapes"].push_back(std::move(entry));
  }
  return out;
}

}  // namespace matmul::stream_order_bench
