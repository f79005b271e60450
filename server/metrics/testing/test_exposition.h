// A /metrics scrape read back for unit tests: each sample line's series
// (name and labels, as printed) and value, and each family's TYPE.
#ifndef MATMUL_SERVER_METRICS_TESTING_TEST_EXPOSITION_H_
#define MATMUL_SERVER_METRICS_TESTING_TEST_EXPOSITION_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace matmul {

struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
};

inline Exposition Parse(const std::string& text) {
  Exposition exposition;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() == 4) exposition.types[parts[2]] = parts[3];
      continue;
    }
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &value)) << line;
    exposition.samples[std::string(line.substr(0, space))] = value;
  }
  return exposition;
}

// -1 when the sample is absent; labels as the exposition orders them
// (by name).
inline double Sample(const Exposition& exposition, const std::string& series) {
  auto it = exposition.samples.find(series);
  return it == exposition.samples.end() ? -1 : it->second;
}

}  // namespace matmul

#endif  // MATMUL_SERVER_METRICS_TESTING_TEST_EXPOSITION_H_
