#include "client/bench/line_chart.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace matmul::bench {
namespace {

// 5x7 glyphs for ASCII 32..126 plus one descender row (g j p q y , ;),
// one byte per row, top row first; bit 4 is the leftmost column.
constexpr uint8_t kFont[95][8] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // ' '
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00},  // !
    {0x0A, 0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00},  // "
    {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A, 0x00},  // #
    {0x04, 0x0F, 0x14, 0x0E, 0x05, 0x1E, 0x04, 0x00},  // $
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03, 0x00},  // %
    {0x0C, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0D, 0x00},  // &
    {0x0C, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00},  // '
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00},  // (
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00},  // )
    {0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00, 0x00},  // *
    {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00, 0x00},  // +
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08},  // ,
    {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00},  // -
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C, 0x00},  // .
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00, 0x00},  // /
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E, 0x00},  // 0
    {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00},  // 1
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F, 0x00},  // 2
    {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E, 0x00},  // 3
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02, 0x00},  // 4
    {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E, 0x00},  // 5
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E, 0x00},  // 6
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00},  // 7
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E, 0x00},  // 8
    {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C, 0x00},  // 9
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00, 0x00},  // :
    {0x00, 0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08},  // ;
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00},  // <
    {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00, 0x00},  // =
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00},  // >
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00},  // ?
    {0x0E, 0x11, 0x01, 0x0D, 0x15, 0x15, 0x0E, 0x00},  // @
    {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x00},  // A
    {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E, 0x00},  // B
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E, 0x00},  // C
    {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C, 0x00},  // D
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F, 0x00},  // E
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10, 0x00},  // F
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F, 0x00},  // G
    {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11, 0x00},  // H
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00},  // I
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C, 0x00},  // J
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00},  // K
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F, 0x00},  // L
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00},  // M
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00},  // N
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00},  // O
    {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10, 0x00},  // P
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D, 0x00},  // Q
    {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11, 0x00},  // R
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E, 0x00},  // S
    {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00},  // T
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E, 0x00},  // U
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00},  // V
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A, 0x00},  // W
    {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11, 0x00},  // X
    {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x00},  // Y
    {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F, 0x00},  // Z
    {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E, 0x00},  // [
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00, 0x00},  // backslash
    {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E, 0x00},  // ]
    {0x04, 0x0A, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00},  // ^
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F, 0x00},  // _
    {0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00},  // `
    {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F, 0x00},  // a
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E, 0x00},  // b
    {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E, 0x00},  // c
    {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F, 0x00},  // d
    {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E, 0x00},  // e
    {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08, 0x00},  // f
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // g
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00},  // h
    {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E, 0x00},  // i
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x12, 0x0C},  // j
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00},  // k
    {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E, 0x00},  // l
    {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11, 0x00},  // m
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00},  // n
    {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E, 0x00},  // o
    {0x00, 0x00, 0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10},  // p
    {0x00, 0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x01},  // q
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00},  // r
    {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E, 0x00},  // s
    {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06, 0x00},  // t
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D, 0x00},  // u
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04, 0x00},  // v
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A, 0x00},  // w
    {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x00},  // x
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0F, 0x01, 0x0E},  // y
    {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F, 0x00},  // z
    {0x02, 0x04, 0x04, 0x08, 0x04, 0x04, 0x02, 0x00},  // {
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00},  // |
    {0x08, 0x04, 0x04, 0x02, 0x04, 0x04, 0x08, 0x00},  // }
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00, 0x00},  // ~
};
constexpr int kGlyphW = 5;
constexpr int kGlyphH = 8;             // 7 rows above the baseline, 1 below.
constexpr int kAdvance = kGlyphW + 1;  // One blank column between glyphs.

constexpr uint32_t kWhite = 0xffffff;
constexpr uint32_t kBlack = 0x000000;
constexpr uint32_t kTextGray = 0x333333;
constexpr uint32_t kGridMajor = 0xdddddd;
constexpr uint32_t kGridMinor = 0xf0f0f0;
constexpr uint32_t kLegendBorder = 0x999999;
constexpr int kMinSide = 200;
constexpr int kMaxSide = 4000;

int TextWidth(absl::string_view text, int scale) {
  return text.empty() ? 0
                      : (static_cast<int>(text.size()) * kAdvance - 1) * scale;
}

struct Rect {
  int x0, y0, x1, y1;  // Inclusive.
  bool Contains(int x, int y) const {
    return x >= x0 && x <= x1 && y >= y0 && y <= y1;
  }
};

// An RGB raster with an optional clip rectangle, so series lines cannot
// paint over the frame and labels.
class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width),
        height_(height),
        rgb_(static_cast<size_t>(width) * height * 3, 0xff),
        clip_{0, 0, width - 1, height - 1} {}

  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& rgb() const { return rgb_; }
  void SetClip(const Rect& clip) { clip_ = clip; }
  void ResetClip() { clip_ = {0, 0, width_ - 1, height_ - 1}; }

  void Set(int x, int y, uint32_t rgb) {
    if (!clip_.Contains(x, y)) return;
    uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
    p[0] = rgb >> 16;
    p[1] = (rgb >> 8) & 0xff;
    p[2] = rgb & 0xff;
  }
  uint32_t Get(int x, int y) const {
    const uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
    return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
  }

  void FillRect(const Rect& r, uint32_t rgb) {
    for (int y = r.y0; y <= r.y1; ++y)
      for (int x = r.x0; x <= r.x1; ++x) Set(x, y, rgb);
  }
  void StrokeRect(const Rect& r, uint32_t rgb) {
    Line(r.x0, r.y0, r.x1, r.y0, rgb, 1);
    Line(r.x0, r.y1, r.x1, r.y1, rgb, 1);
    Line(r.x0, r.y0, r.x0, r.y1, rgb, 1);
    Line(r.x1, r.y0, r.x1, r.y1, rgb, 1);
  }

  // Bresenham with a thickness x thickness brush. `dash_phase`, when given,
  // carries the on/off pattern across the segments of one polyline so the
  // dashes do not restart at every point.
  void Line(int x0, int y0, int x1, int y1, uint32_t rgb, int thickness,
            int* dash_phase = nullptr) {
    const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
    const int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    while (true) {
      bool on = dash_phase == nullptr || (*dash_phase)++ % 14 < 8;
      if (on) {
        for (int by = 0; by < thickness; ++by)
          for (int bx = 0; bx < thickness; ++bx) Set(x0 + bx, y0 + by, rgb);
      }
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }

  void Disc(int cx, int cy, int r, uint32_t rgb) {
    for (int y = -r; y <= r; ++y)
      for (int x = -r; x <= r; ++x)
        if (x * x + y * y <= r * r + r) Set(cx + x, cy + y, rgb);
  }

  // Top-left at (x, y); characters outside 32..126 draw as '?'.
  // `vertical` turns the text 90 degrees counter-clockwise, so it reads
  // bottom-up from (x, y), which is then its bottom-left corner.
  void Text(int x, int y, absl::string_view text, uint32_t rgb, int scale,
            bool vertical = false) {
    for (size_t i = 0; i < text.size(); ++i) {
      const unsigned char c = text[i];
      const uint8_t* glyph = kFont[(c >= 32 && c <= 126 ? c : '?') - 32];
      for (int gy = 0; gy < kGlyphH; ++gy) {
        for (int gx = 0; gx < kGlyphW; ++gx) {
          if (!(glyph[gy] & (0x10 >> gx))) continue;
          const int along = (static_cast<int>(i) * kAdvance + gx) * scale;
          for (int sy = 0; sy < scale; ++sy) {
            for (int sx = 0; sx < scale; ++sx) {
              if (vertical) {
                Set(x + gy * scale + sy, y - along - sx, rgb);
              } else {
                Set(x + along + sx, y + gy * scale + sy, rgb);
              }
            }
          }
        }
      }
    }
  }

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;
  Rect clip_;
};

absl::Status Validate(const ChartSpec& spec) {
  if (spec.width < kMinSide || spec.width > kMaxSide ||
      spec.height < kMinSide || spec.height > kMaxSide) {
    return absl::InvalidArgumentError(
        absl::StrFormat("chart size %dx%d: width and height must be in "
                        "[%d, %d]",
                        spec.width, spec.height, kMinSide, kMaxSide));
  }
  if (spec.series.empty()) {
    return absl::InvalidArgumentError("chart has no series");
  }
  for (size_t s = 0; s < spec.series.size(); ++s) {
    const ChartSeries& series = spec.series[s];
    const std::string name =
        absl::StrFormat("series %d ('%s')", s, series.label);
    if (series.points.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has no points"));
    }
    if (!series.point_labels.empty() &&
        series.point_labels.size() != series.points.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has %d point labels for %d points", name,
                          series.point_labels.size(), series.points.size()));
    }
    for (size_t i = 0; i < series.points.size(); ++i) {
      const auto [x, y] = series.points[i];
      if (!std::isfinite(x) || !std::isfinite(y)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s point %d (%g, %g) is not finite", name, i, x, y));
      }
      if ((spec.log_x && x <= 0) || (spec.log_y && y <= 0)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s point %d (%g, %g) is not positive on a log %s axis", name, i, x,
            y, spec.log_x && x <= 0 ? "x" : "y"));
      }
    }
  }
  return absl::OkStatus();
}

// Data value -> pixel along one axis; p0 is the pixel of `lo`.
struct AxisMap {
  double lo, hi;
  bool log;
  int p0, p1;
  int operator()(double v) const {
    const double t =
        log ? std::log10(v / lo) / std::log10(hi / lo) : (v - lo) / (hi - lo);
    return static_cast<int>(std::lround(p0 + t * (p1 - p0)));
  }
};

// The step that FormatTick sizes decimals by: the linear tick spacing.
double TickStep(const internal::AxisTicks& axis) {
  return axis.ticks.size() > 1 ? axis.ticks[1] - axis.ticks[0]
                               : axis.hi - axis.lo;
}

void AppendBigEndian32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char(v >> shift));
}

void AppendChunk(std::string& png, const char type[4],
                 const std::string& data) {
  AppendBigEndian32(png, static_cast<uint32_t>(data.size()));
  const size_t type_at = png.size();
  png.append(type, 4);
  png.append(data);
  // The CRC covers the type and the data, not the length.
  const uLong crc = crc32(crc32(0L, Z_NULL, 0),
                          reinterpret_cast<const Bytef*>(png.data() + type_at),
                          4 + data.size());
  AppendBigEndian32(png, static_cast<uint32_t>(crc));
}

absl::StatusOr<std::string> EncodePng(const Canvas& canvas) {
  const int w = canvas.width(), h = canvas.height();
  const size_t row = static_cast<size_t>(w) * 3;
  std::string raw;
  raw.reserve(h * (row + 1));
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // Filter 0 (None): flat colour runs deflate well as is.
    raw.append(reinterpret_cast<const char*>(canvas.rgb().data()) + y * row,
               row);
  }
  uLongf deflated_size = compressBound(raw.size());
  std::string deflated(deflated_size, '\0');
  const int rc =
      compress2(reinterpret_cast<Bytef*>(deflated.data()), &deflated_size,
                reinterpret_cast<const Bytef*>(raw.data()), raw.size(),
                Z_DEFAULT_COMPRESSION);
  if (rc != Z_OK) {
    return absl::InternalError(absl::StrCat("zlib compress2 failed: ", rc));
  }
  deflated.resize(deflated_size);

  std::string ihdr;
  AppendBigEndian32(ihdr, w);
  AppendBigEndian32(ihdr, h);
  // Bit depth 8, colour type 2 (RGB), deflate, adaptive filtering, no
  // interlace.
  ihdr.append({8, 2, 0, 0, 0});
  std::string png("\x89PNG\r\n\x1a\n", 8);
  AppendChunk(png, "IHDR", ihdr);
  AppendChunk(png, "IDAT", deflated);
  AppendChunk(png, "IEND", "");
  return png;
}

}  // namespace

namespace internal {

AxisTicks ComputeAxisTicks(double min, double max, bool log) {
  AxisTicks axis;
  if (log) {
    int e_lo = static_cast<int>(std::floor(std::log10(min) + 1e-9));
    int e_hi = static_cast<int>(std::ceil(std::log10(max) - 1e-9));
    if (e_hi <= e_lo) e_hi = e_lo + 1;
    axis.lo = std::pow(10.0, e_lo);
    axis.hi = std::pow(10.0, e_hi);
    const int decades = e_hi - e_lo;
    // Label every decade up to ten of them; beyond that every stride-th.
    const int stride = (decades + 9) / 10;
    for (int e = e_lo; e <= e_hi; e += stride) {
      axis.ticks.push_back(std::pow(10.0, e));
      // A range of one or two decades has too few ticks to read values off.
      if (decades <= 2 && e < e_hi) {
        axis.ticks.push_back(2 * std::pow(10.0, e));
        axis.ticks.push_back(5 * std::pow(10.0, e));
      }
    }
    std::sort(axis.ticks.begin(), axis.ticks.end());
    return axis;
  }
  if (!(max > min)) {
    const double pad = min == 0 ? 1 : std::abs(min) * 0.1;
    min -= pad;
    max += pad;
  }
  // Aim for about five intervals, rounded to 1, 2 or 5 x 10^k: 4 to 10 ticks.
  const double rough = (max - min) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(rough)));
  const double f = rough / mag;
  const double step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
  const double first = std::floor(min / step + 1e-9);
  const double last = std::ceil(max / step - 1e-9);
  axis.lo = first * step;
  axis.hi = last * step;
  for (double i = first; i <= last + 0.5; ++i) {
    // i * step rather than accumulating, so 0.1 + 0.2 drift never shows.
    const double v = i * step;
    axis.ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return axis;
}

std::string FormatTick(double value, double step, bool log) {
  if (log) {
    const int e = static_cast<int>(std::floor(std::log10(value) + 1e-9));
    if (e < -3 || e > 5) {
      return absl::StrFormat("%.0fe%d", value / std::pow(10.0, e), e);
    }
    return absl::StrFormat("%.*f", std::max(0, -e), value);
  }
  if (std::abs(value) < step * 1e-6) value = 0;  // Never print "-0".
  if (std::abs(value) >= 1e7) return absl::StrFormat("%g", value);
  const int decimals =
      std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  return absl::StrFormat("%.*f", decimals, value);
}

}  // namespace internal

absl::StatusOr<std::string> RenderPng(const ChartSpec& spec) {
  if (absl::Status s = Validate(spec); !s.ok()) return s;

  double min_x = INFINITY, max_x = -INFINITY, min_y = INFINITY,
         max_y = -INFINITY;
  for (const ChartSeries& series : spec.series) {
    for (const auto& [x, y] : series.points) {
      min_x = std::min(min_x, x), max_x = std::max(max_x, x);
      min_y = std::min(min_y, y), max_y = std::max(max_y, y);
    }
  }
  const internal::AxisTicks xa =
      internal::ComputeAxisTicks(min_x, max_x, spec.log_x);
  const internal::AxisTicks ya =
      internal::ComputeAxisTicks(min_y, max_y, spec.log_y);
  std::vector<std::string> x_text, y_text;
  for (double t : xa.ticks)
    x_text.push_back(internal::FormatTick(t, TickStep(xa), spec.log_x));
  for (double t : ya.ticks)
    y_text.push_back(internal::FormatTick(t, TickStep(ya), spec.log_y));

  // Layout: margins sized to what goes in them, the plot gets the rest.
  constexpr int kTick = 5, kPad = 10;
  int y_text_w = 0;
  for (const std::string& t : y_text)
    y_text_w = std::max(y_text_w, TextWidth(t, 1));
  const int left =
      kPad + (spec.y_label.empty() ? 0 : kGlyphH + kPad) + y_text_w + 4 + kTick;
  const int top = spec.title.empty() ? 2 * kPad : 2 * kPad + 2 * kGlyphH + kPad;
  const int bottom =
      kTick + 4 + kGlyphH + (spec.x_label.empty() ? 0 : kPad + kGlyphH) + kPad;
  const int right = std::max(2 * kPad, TextWidth(x_text.back(), 1) / 2 + 4);
  const Rect plot{left, top, spec.width - 1 - right, spec.height - 1 - bottom};
  const AxisMap mx{xa.lo, xa.hi, spec.log_x, plot.x0, plot.x1};
  const AxisMap my{ya.lo, ya.hi, spec.log_y, plot.y1, plot.y0};

  Canvas canvas(spec.width, spec.height);
  // Minor log grid (2..9 x 10^k) first, so labelled lines draw over it.
  for (double d = xa.lo; spec.log_x && d < xa.hi; d *= 10) {
    for (int k = 2; k <= 9; ++k) {
      canvas.Line(mx(k * d), plot.y0, mx(k * d), plot.y1, kGridMinor, 1);
    }
  }
  for (double d = ya.lo; spec.log_y && d < ya.hi; d *= 10) {
    for (int k = 2; k <= 9; ++k) {
      canvas.Line(plot.x0, my(k * d), plot.x1, my(k * d), kGridMinor, 1);
    }
  }
  for (size_t i = 0; i < xa.ticks.size(); ++i) {
    const int px = mx(xa.ticks[i]);
    canvas.Line(px, plot.y0, px, plot.y1, kGridMajor, 1);
    canvas.Line(px, plot.y1, px, plot.y1 + kTick, kBlack, 1);
    canvas.Text(px - TextWidth(x_text[i], 1) / 2, plot.y1 + kTick + 4,
                x_text[i], kTextGray, 1);
  }
  for (size_t i = 0; i < ya.ticks.size(); ++i) {
    const int py = my(ya.ticks[i]);
    canvas.Line(plot.x0, py, plot.x1, py, kGridMajor, 1);
    canvas.Line(plot.x0 - kTick, py, plot.x0, py, kBlack, 1);
    canvas.Text(plot.x0 - kTick - 4 - TextWidth(y_text[i], 1), py - kGlyphH / 2,
                y_text[i], kTextGray, 1);
  }
  canvas.StrokeRect(plot, kBlack);

  // Series, clipped one pixel inside the frame.
  canvas.SetClip({plot.x0 + 1, plot.y0 + 1, plot.x1 - 1, plot.y1 - 1});
  for (const ChartSeries& series : spec.series) {
    int dash_phase = 0;
    for (size_t i = 1; i < series.points.size(); ++i) {
      const auto& [ax, ay] = series.points[i - 1];
      const auto& [bx, by] = series.points[i];
      canvas.Line(mx(ax), my(ay), mx(bx), my(by), series.rgb, 2,
                  series.dashed ? &dash_phase : nullptr);
    }
  }
  // Markers and point labels over every line, so no series hides another's
  // points; labels may spill past the frame onto the margin.
  canvas.ResetClip();
  for (const ChartSeries& series : spec.series) {
    for (size_t i = 0; i < series.points.size(); ++i) {
      const int px = mx(series.points[i].first);
      const int py = my(series.points[i].second);
      canvas.Disc(px, py, 3, series.rgb);
      if (!series.point_labels.empty()) {
        canvas.Text(px + 5, py - kGlyphH - 4, series.point_labels[i],
                    series.rgb, 1);
      }
    }
  }

  // Legend: in the plot corner that covers the fewest series pixels.
  int label_w = 0;
  for (const ChartSeries& series : spec.series)
    label_w = std::max(label_w, TextWidth(series.label, 1));
  if (label_w > 0) {
    constexpr int kRowH = 14, kSample = 24;
    const int w = kPad + kSample + 6 + label_w + kPad;
    const int h = 6 + static_cast<int>(spec.series.size()) * kRowH;
    const int inset = 8;
    const Rect corners[] = {
        {plot.x1 - inset - w, plot.y0 + inset, plot.x1 - inset,
         plot.y0 + inset + h},
        {plot.x0 + inset, plot.y0 + inset, plot.x0 + inset + w,
         plot.y0 + inset + h},
        {plot.x1 - inset - w, plot.y1 - inset - h, plot.x1 - inset,
         plot.y1 - inset},
        {plot.x0 + inset, plot.y1 - inset - h, plot.x0 + inset + w,
         plot.y1 - inset},
    };
    Rect best = corners[0];
    int best_ink = -1;
    for (const Rect& r : corners) {
      int ink = 0;
      for (int y = std::max(r.y0, 0); y <= std::min(r.y1, spec.height - 1); ++y)
        for (int x = std::max(r.x0, 0); x <= std::min(r.x1, spec.width - 1);
             ++x)
          for (const ChartSeries& series : spec.series)
            ink += canvas.Get(x, y) == series.rgb;
      if (best_ink < 0 || ink < best_ink) best = r, best_ink = ink;
    }
    canvas.FillRect(best, kWhite);
    canvas.StrokeRect(best, kLegendBorder);
    for (size_t s = 0; s < spec.series.size(); ++s) {
      const ChartSeries& series = spec.series[s];
      const int cy = best.y0 + 6 + static_cast<int>(s) * kRowH + kGlyphH / 2;
      int dash_phase = 0;
      canvas.Line(best.x0 + kPad, cy, best.x0 + kPad + kSample, cy, series.rgb,
                  2, series.dashed ? &dash_phase : nullptr);
      canvas.Disc(best.x0 + kPad + kSample / 2, cy, 3, series.rgb);
      canvas.Text(best.x0 + kPad + kSample + 6, cy - kGlyphH / 2, series.label,
                  kBlack, 1);
    }
  }

  // Titles last: nothing draws over them.
  canvas.Text((spec.width - TextWidth(spec.title, 2)) / 2, kPad, spec.title,
              kBlack, 2);
  canvas.Text((plot.x0 + plot.x1 - TextWidth(spec.x_label, 1)) / 2,
              spec.height - kPad - kGlyphH, spec.x_label, kBlack, 1);
  canvas.Text(kPad, (plot.y0 + plot.y1 + TextWidth(spec.y_label, 1)) / 2,
              spec.y_label, kBlack, 1, /*vertical=*/true);
  return EncodePng(canvas);
}

absl::Status WritePng(const ChartSpec& spec, const std::string& path) {
  absl::StatusOr<std::string> png = RenderPng(spec);
  if (!png.ok()) return png.status();
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("open '", path, "'"));
  }
  for (size_t done = 0; done < png->size();) {
    const ssize_t n = write(fd, png->data() + done, png->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("write '", path, "'"));
    }
    done += static_cast<size_t>(n);
  }
  // close can report a deferred write error (e.g. NFS, full disk).
  if (close(fd) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("close '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace matmul::bench
