#include "common/gemm/reference_gemm.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/bf16.h"

namespace matmul {
namespace {

double LoadElement(const void* base, DType dtype, int64_t offset) {
  if (dtype == DType::kBF16) {
    return Bf16ToFloat(static_cast<const uint16_t*>(base)[offset]);
  }
  return static_cast<const float*>(base)[offset];
}

const void* InputBase(const InputMatrix& matrix, int64_t b) {
  if (matrix.pointers != nullptr) return matrix.pointers[b];
  return static_cast<const char*>(matrix.data) +
         b * matrix.strides.batch * DTypeSize(DType::kBF16);
}

const void* OutputBase(const GemmProblem& problem, int64_t b) {
  if (problem.c.pointers != nullptr) return problem.c.pointers[b];
  return static_cast<const char*>(problem.c.data) +
         b * problem.c.strides.batch * DTypeSize(problem.c_dtype);
}

}  // namespace

std::vector<double> ReferenceGemm(const GemmProblem& p) {
  std::vector<double> out(static_cast<size_t>(p.batch * p.m * p.n));
  std::vector<double> row(static_cast<size_t>(p.n));
  for (int64_t b = 0; b < p.batch; ++b) {
    const void* a = InputBase(p.a, b);
    const void* bm = InputBase(p.b, b);
    for (int64_t i = 0; i < p.m; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t kk = 0; kk < p.k; ++kk) {
        double a_ik = LoadElement(a, DType::kBF16,
                                  i * p.a.strides.row + kk * p.a.strides.col);
        if (a_ik == 0.0) continue;
        for (int64_t j = 0; j < p.n; ++j) {
          row[j] +=
              a_ik * LoadElement(bm, DType::kBF16,
                                 kk * p.b.strides.row + j * p.b.strides.col);
        }
      }
      double* dst = &out[static_cast<size_t>((b * p.m + i) * p.n)];
      for (int64_t j = 0; j < p.n; ++j) {
        double value = p.alpha * row[j];
        if (p.beta != 0.0f) {
          value +=
              p.beta * LoadElement(OutputBase(p, b), p.c_dtype,
                                   i * p.c.strides.row + j * p.c.strides.col);
        }
        dst[j] = value;
      }
    }
  }
  return out;
}

std::vector<double> ReadOutput(const GemmProblem& p) {
  std::vector<double> out(static_cast<size_t>(p.batch * p.m * p.n));
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        out[static_cast<size_t>((b * p.m + i) * p.n + j)] =
            LoadElement(OutputBase(p, b), p.c_dtype,
                        i * p.c.strides.row + j * p.c.strides.col);
      }
    }
  }
  return out;
}

double RelativeError(const std::vector<double>& actual,
                     const std::vector<double>& expected) {
  if (actual.size() != expected.size()) {
    return std::numeric_limits<double>::infinity();
  }
  double diff = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(actual[i])) {
      return std::numeric_limits<double>::infinity();
    }
    double d = actual[i] - expected[i];
    diff += d * d;
    norm += expected[i] * expected[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace matmul
