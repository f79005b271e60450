#include "kernels/cuda/tools/bench_common.h"

#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace matmul::cuda {

std::string BenchShape::Name() const {
  return batch == 1 ? absl::StrCat(m, "x", n, "x", k)
                    : absl::StrCat(batch, "x", m, "x", n, "x", k);
}

absl::StatusOr<std::vector<BenchShape>> ParseShapes(const std::string& text) {
  std::vector<BenchShape> shapes;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<int64_t> v;
    for (absl::string_view part : absl::StrSplit(item, 'x')) {
      int64_t x = 0;
      if (!absl::SimpleAtoi(part, &x) || x < 1) {
        return absl::InvalidArgumentError(absl::StrCat("bad shape ", item));
      }
      v.push_back(x);
    }
    if (v.size() == 3) {
      shapes.push_back({1, v[0], v[1], v[2]});
    } else if (v.size() == 4) {
      shapes.push_back({v[0], v[1], v[2], v[3]});
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad shape ", item));
    }
  }
  if (shapes.empty()) return absl::InvalidArgumentError("no shapes given");
  return shapes;
}

absl::StatusOr<std::vector<std::string>> ParseLayouts(const std::string& text) {
  std::vector<std::string> layouts =
      absl::StrSplit(text, ',', absl::SkipEmpty());
  for (const std::string& l : layouts) {
    if (l.size() != 2 || (l[0] != 'N' && l[0] != 'T') ||
        (l[1] != 'N' && l[1] != 'T')) {
      return absl::InvalidArgumentError(absl::StrCat("bad layout ", l));
    }
  }
  if (layouts.empty()) return absl::InvalidArgumentError("no layouts given");
  return layouts;
}

GemmProblem MakeBenchProblem(const BenchShape& s, const std::string& layout,
                             DType dtype) {
  GemmProblem p;
  p.batch = s.batch;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.c_dtype = dtype;
  p.a.strides = layout[0] == 'T' ? Strides{s.m * s.k, 1, s.m}
                                 : Strides{s.m * s.k, s.k, 1};
  p.b.strides = layout[1] == 'T' ? Strides{s.k * s.n, 1, s.k}
                                 : Strides{s.k * s.n, s.n, 1};
  p.c.strides = {s.m * s.n, s.n, 1};
  return p;
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& json,
                           int indent) {
  std::ofstream file(path);
  file << json.dump(indent) << "\n";
  if (!file.good()) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace matmul::cuda
