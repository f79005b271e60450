#include "client/bench/line_chart.h"

#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace matmul::bench {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// Tick values are i * step, so 3 * 0.05 may be 0.15000000000000002.
::testing::Matcher<const std::vector<double>&> TicksAre(
    std::vector<double> expected) {
  return Pointwise(DoubleNear(1e-12), expected);
}

constexpr uint32_t kBlue = 0x1f77b4;
constexpr uint32_t kOrange = 0xff7f0e;

uint32_t BigEndian32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) |
         (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) |
         uint32_t{static_cast<uint8_t>(s[at + 3])};
}

// A PNG taken apart by an independent reader: chunks checked, IDAT
// inflated, filter bytes checked and stripped.
struct DecodedPng {
  int width = 0;
  int height = 0;
  std::vector<std::string> chunk_types;
  std::vector<uint8_t> rgb;  // width * height * 3.

  uint32_t At(int x, int y) const {
    const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
    return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
  }
  // Pixels of `color` in the box [x0, x1) x [y0, y1), in fractions of the
  // image size.
  int Count(uint32_t color, double x0, double y0, double x1, double y1) const {
    int n = 0;
    for (int y = int(y0 * height); y < int(y1 * height); ++y)
      for (int x = int(x0 * width); x < int(x1 * width); ++x)
        n += At(x, y) == color;
    return n;
  }
};

// Fails the current test (and returns what it has) on any format error.
DecodedPng Decode(const std::string& png) {
  DecodedPng out;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  for (size_t at = 8; at < png.size();) {
    if (at + 12 > png.size()) {
      ADD_FAILURE() << "truncated chunk at " << at;
      return out;
    }
    const uint32_t length = BigEndian32(png, at);
    if (at + 12 + length > png.size()) {
      ADD_FAILURE() << "chunk at " << at << " runs past the end";
      return out;
    }
    const std::string type = png.substr(at + 4, 4);
    const std::string data = png.substr(at + 8, length);
    const uLong crc =
        crc32(crc32(0L, Z_NULL, 0),
              reinterpret_cast<const Bytef*>(png.data() + at + 4), 4 + length);
    EXPECT_EQ(BigEndian32(png, at + 8 + length), crc) << "CRC of " << type;
    out.chunk_types.push_back(type);
    if (type == "IHDR") {
      EXPECT_EQ(length, 13u);
      out.width = static_cast<int>(BigEndian32(data, 0));
      out.height = static_cast<int>(BigEndian32(data, 4));
      EXPECT_EQ(data[8], 8) << "bit depth";
      EXPECT_EQ(data[9], 2) << "colour type RGB";
      EXPECT_EQ(data.substr(10), std::string(3, '\0'))
          << "compression, filter, interlace";
    }
    if (type == "IDAT") idat += data;
    at += 12 + length;
  }
  const size_t row = 1 + 3 * static_cast<size_t>(out.width);
  const size_t expected = row * out.height;
  // One spare byte: if the stream inflates to more than expected, uncompress
  // fails with Z_BUF_ERROR instead of silently truncating.
  std::vector<uint8_t> raw(expected + 1);
  uLongf raw_size = raw.size();
  EXPECT_EQ(
      uncompress(raw.data(), &raw_size,
                 reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
      Z_OK);
  EXPECT_EQ(raw_size, expected);
  if (raw_size != expected) return out;
  for (int y = 0; y < out.height; ++y) {
    EXPECT_EQ(raw[y * row], 0) << "filter byte of row " << y;
    out.rgb.insert(out.rgb.end(), raw.begin() + y * row + 1,
                   raw.begin() + (y + 1) * row);
  }
  return out;
}

ChartSpec TwoSeries() {
  ChartSpec spec;
  spec.title = "p50 latency vs throughput";
  spec.x_label = "throughput (req/s)";
  spec.y_label = "p50 latency (ms)";
  // Both lines cross the middle of the plot; the legend sits in a corner.
  spec.series.push_back({.label = "batching on",
                         .points = {{0, 0}, {50, 50}, {100, 100}},
                         .rgb = kBlue,
                         .point_labels = {"c=1", "c=8", "c=64"}});
  spec.series.push_back({.label = "batching off",
                         .points = {{0, 100}, {100, 0}},
                         .rgb = kOrange,
                         .dashed = true});
  return spec;
}

TEST(LineChartTest, WellFormedPngWithSeriesPixels) {
  ChartSpec spec = TwoSeries();
  spec.width = 640;
  spec.height = 400;
  absl::StatusOr<std::string> png = RenderPng(spec);
  ASSERT_TRUE(png.ok()) << png.status();
  const DecodedPng decoded = Decode(*png);
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_EQ(decoded.width, 640);
  EXPECT_EQ(decoded.height, 400);
  EXPECT_THAT(decoded.chunk_types, ElementsAre("IHDR", "IDAT", "IEND"));
  EXPECT_EQ(decoded.At(0, 0), 0xffffffu);
  EXPECT_EQ(decoded.At(639, 399), 0xffffffu);
  // Both series cross the centre of the plot.
  EXPECT_GT(decoded.Count(kBlue, 0.4, 0.4, 0.6, 0.6), 20);
  EXPECT_GT(decoded.Count(kOrange, 0.4, 0.4, 0.6, 0.6), 20);
  // The frame and text are black somewhere; the title is at the top.
  EXPECT_GT(decoded.Count(0x000000, 0.3, 0, 0.7, 0.08), 50);
}

TEST(LineChartTest, LogAxesPlaceDecadesEvenly) {
  ChartSpec spec;
  spec.log_x = spec.log_y = true;
  // On log-log axes this is a straight line through the centre of the
  // plot; on linear axes it would hug the left and bottom edges instead.
  spec.series.push_back({.label = "power law",
                         .points = {{1, 1000}, {10, 100}, {100, 10}, {1000, 1}},
                         .rgb = kBlue});
  absl::StatusOr<std::string> png = RenderPng(spec);
  ASSERT_TRUE(png.ok()) << png.status();
  const DecodedPng decoded = Decode(*png);
  ASSERT_FALSE(::testing::Test::HasFailure());
  EXPECT_GT(decoded.Count(kBlue, 0.45, 0.45, 0.55, 0.55), 20);

  spec.log_x = spec.log_y = false;
  png = RenderPng(spec);
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(Decode(*png).Count(kBlue, 0.45, 0.45, 0.55, 0.55), 0);
}

TEST(LineChartTest, SinglePointAndExtremeSizesRender) {
  ChartSpec spec;
  spec.series.push_back({.label = "one", .points = {{3, 3}}, .rgb = kBlue});
  for (auto [w, h] : {std::pair{200, 200}, std::pair{4000, 300}}) {
    spec.width = w;
    spec.height = h;
    absl::StatusOr<std::string> png = RenderPng(spec);
    ASSERT_TRUE(png.ok()) << png.status();
    const DecodedPng decoded = Decode(*png);
    EXPECT_EQ(decoded.width, w);
    EXPECT_EQ(decoded.height, h);
  }
}

TEST(LineChartTest, RejectsBadInput) {
  const auto expect_invalid = [](const ChartSpec& spec,
                                 const std::string& message) {
    absl::StatusOr<std::string> png = RenderPng(spec);
    EXPECT_EQ(png.status().code(), absl::StatusCode::kInvalidArgument)
        << png.status();
    EXPECT_THAT(png.status().message(), HasSubstr(message));
  };
  ChartSpec spec;
  expect_invalid(spec, "no series");

  spec = TwoSeries();
  spec.series[1].points.clear();
  expect_invalid(spec, "series 1 ('batching off') has no points");

  spec = TwoSeries();
  spec.series[0].points[1].second = std::nan("");
  expect_invalid(spec, "point 1 (50, nan) is not finite");
  spec.series[0].points[1].second = std::numeric_limits<double>::infinity();
  expect_invalid(spec, "is not finite");

  spec = TwoSeries();  // Has x = 0 and y = 0.
  spec.log_x = true;
  expect_invalid(spec, "not positive on a log x axis");
  spec.log_x = false;
  spec.log_y = true;
  expect_invalid(spec, "not positive on a log y axis");

  spec = TwoSeries();
  spec.series[0].point_labels.pop_back();
  expect_invalid(spec, "2 point labels for 3 points");

  for (auto [w, h] : {std::pair{199, 600}, std::pair{960, 4001},
                      std::pair{0, 0}, std::pair{-5, 600}}) {
    spec = TwoSeries();
    spec.width = w;
    spec.height = h;
    expect_invalid(spec, "must be in [200, 4000]");
  }
}

TEST(LineChartTest, WritePngWritesTheRenderedBytes) {
  const std::string path = ::testing::TempDir() + "/line_chart_test.png";
  ASSERT_TRUE(WritePng(TwoSeries(), path).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
  EXPECT_EQ(written, *RenderPng(TwoSeries()));
}

TEST(LineChartTest, WritePngErrorNamesThePath) {
  const std::string path = "/nonexistent-dir-for-line-chart-test/chart.png";
  const absl::Status status = WritePng(TwoSeries(), path);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("No such file or directory"));
  // Input errors come before any I/O.
  EXPECT_EQ(WritePng(ChartSpec{}, path).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AxisTicksTest, LinearTicksAreNiceAndCoverTheData) {
  internal::AxisTicks axis = internal::ComputeAxisTicks(0.3, 9.7, false);
  EXPECT_EQ(axis.lo, 0);
  EXPECT_EQ(axis.hi, 10);
  EXPECT_THAT(axis.ticks, TicksAre({0, 2, 4, 6, 8, 10}));

  axis = internal::ComputeAxisTicks(1234, 98765, false);
  EXPECT_THAT(axis.ticks, TicksAre({0, 20000, 40000, 60000, 80000, 100000}));

  axis = internal::ComputeAxisTicks(-0.07, 0.13, false);
  EXPECT_THAT(axis.ticks, TicksAre({-0.1, -0.05, 0, 0.05, 0.1, 0.15}));

  // A single value gets a range around it.
  axis = internal::ComputeAxisTicks(5, 5, false);
  EXPECT_LT(axis.lo, 5);
  EXPECT_GT(axis.hi, 5);
}

TEST(AxisTicksTest, LogTicksAreDecades) {
  internal::AxisTicks axis = internal::ComputeAxisTicks(3, 700, true);
  EXPECT_EQ(axis.lo, 1);
  EXPECT_EQ(axis.hi, 1000);
  EXPECT_THAT(axis.ticks, TicksAre({1, 10, 100, 1000}));

  // Two decades or fewer also get 2x and 5x.
  axis = internal::ComputeAxisTicks(0.3, 7, true);
  EXPECT_THAT(axis.ticks, TicksAre({0.1, 0.2, 0.5, 1, 2, 5, 10}));

  axis = internal::ComputeAxisTicks(10, 10, true);
  EXPECT_EQ(axis.lo, 10);
  EXPECT_EQ(axis.hi, 100);
}

TEST(AxisTicksTest, FormatTick) {
  EXPECT_EQ(internal::FormatTick(40, 20, false), "40");
  EXPECT_EQ(internal::FormatTick(0.25, 0.05, false), "0.25");
  EXPECT_EQ(internal::FormatTick(-1e-17, 0.1, false), "0.0");
  EXPECT_EQ(internal::FormatTick(0.001, 0, true), "0.001");
  EXPECT_EQ(internal::FormatTick(1000, 0, true), "1000");
  EXPECT_EQ(internal::FormatTick(1e6, 0, true), "1e6");
  EXPECT_EQ(internal::FormatTick(2e-5, 0, true), "2e-5");
}

}  // namespace
}  // namespace matmul::bench
