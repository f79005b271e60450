// What the benchmark tools (matmul-bench, cublaslt-survey) share: the shapes
// and operand layouts they take on their command lines ("5120x2048x2048",
// "NT"), the dense problems those describe, and their JSON output.
#ifndef MATMUL_KERNELS_CUDA_TOOLS_BENCH_COMMON_H_
#define MATMUL_KERNELS_CUDA_TOOLS_BENCH_COMMON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "nlohmann/json.hpp"

namespace matmul::cuda {

struct BenchShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  // "MxNxK", or "BxMxNxK" for a batch.
  std::string Name() const;
};

// Comma-separated MxNxK (or BxMxNxK) shapes.
absl::StatusOr<std::vector<BenchShape>> ParseShapes(const std::string& text);

// Comma-separated layouts of two letters each: N = row-major, T =
// transposed (column-major), for A then B.
absl::StatusOr<std::vector<std::string>> ParseLayouts(const std::string& text);

// The problem of `shape` with packed operands in `layout` ("NT") and a
// row-major C of `dtype`; no data pointers yet.
GemmProblem MakeBenchProblem(const BenchShape& shape, const std::string& layout,
                             DType dtype);

// Writes `json` (indented by `indent`) to the file at `path`.
absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& json,
                           int indent);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_TOOLS_BENCH_COMMON_H_
