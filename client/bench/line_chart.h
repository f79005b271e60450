// matmul::bench line charts: a small PNG writer for `matmul-cli bench`
// (latency vs throughput, batching on and off, over a concurrency sweep),
// so a benchmark run leaves a picture without a plotting stack installed.
//
//   ChartSpec spec{.title = "p50 latency vs throughput",
//                  .x_label = "throughput (req/s)", .y_label = "p50 (ms)",
//                  .log_y = true};
//   spec.series.push_back({.label = "batching on", .points = {{900, 1.2}},
//                          .rgb = 0x1f77b4, .point_labels = {"c=8"}});
//   RETURN_IF_ERROR(WritePng(spec, "latency.png"));
//
// The picture: white background, title, axes with 1/2/5 x 10^k ticks (or
// decades when log), grid, tick labels, axis titles (the y title rotated),
// one polyline with round markers per series, optional per-point labels,
// and a legend in whichever plot corner hides the least of the lines. Text
// uses a built-in 5x7 ASCII font (with descenders); there is no anti-aliasing.
// The PNG is 8-bit RGB, one IDAT, filter 0 on every row, deflated by zlib.
#ifndef MATMUL_CLIENT_BENCH_LINE_CHART_H_
#define MATMUL_CLIENT_BENCH_LINE_CHART_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace matmul::bench {

struct ChartSeries {
  std::string label;  // Legend text.
  // (x, y) in drawing order; the line joins them as given, unsorted.
  std::vector<std::pair<double, double>> points;
  uint32_t rgb = 0x1f77b4;  // 0xRRGGBB.
  bool dashed = false;
  // Empty, or one short label per point (e.g. "c=64"), drawn beside it.
  std::vector<std::string> point_labels;
};

struct ChartSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;
  bool log_y = false;
  int width = 960;  // Pixels, each in [200, 4000].
  int height = 600;
  std::vector<ChartSeries> series;
};

// The PNG file bytes. INVALID_ARGUMENT, naming the series and point, for:
// no series, a series without points, a non-finite coordinate, a value
// <= 0 on a log axis, point_labels whose size is neither 0 nor the number
// of points, or a width or height outside [200, 4000].
absl::StatusOr<std::string> RenderPng(const ChartSpec& spec);

// RenderPng, then writes the bytes to `path` (created or truncated, 0644).
// I/O errors carry the path and the errno text.
absl::Status WritePng(const ChartSpec& spec, const std::string& path);

namespace internal {

// One axis: the drawn range [lo, hi] and the values that get a labelled
// tick and grid line. Linear: lo and hi are multiples of a 1/2/5 x 10^k
// step giving about 4..10 ticks. Log (min > 0): lo and hi are powers of
// ten, ticks every decade, plus 2x and 5x when the range spans at most two
// decades. A degenerate range (min == max) is widened around the value.
struct AxisTicks {
  double lo = 0;
  double hi = 1;
  std::vector<double> ticks;
};
AxisTicks ComputeAxisTicks(double min, double max, bool log);

// The tick text: as many decimals as the linear step needs ("0.25", "40";
// %g from 1e7 up), and on log axes "1e6" style outside [1e-3, 1e5].
std::string FormatTick(double value, double step, bool log);

}  // namespace internal
}  // namespace matmul::bench

#endif  // MATMUL_CLIENT_BENCH_LINE_CHART_H_
