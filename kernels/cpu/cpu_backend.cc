#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/status/status.h"
#include "common/bf16.h"

namespace matmul {
namespace {

// Columns of A (rows of B) widened per sgemm call: bounds the FP32 copies to
// (m + n) * kBlockK floats whatever K is.
constexpr int64_t kBlockK = 512;

const uint16_t* InputBase(const InputMatrix& matrix, int64_t b) {
  const void* base = matrix.pointers != nullptr
                         ? matrix.pointers[b]
                         : static_cast<const uint16_t*>(matrix.data) +
                               b * matrix.strides.batch;
  return static_cast<const uint16_t*>(base);
}

char* OutputBase(const GemmProblem& p, int64_t b) {
  if (p.c.pointers != nullptr) return static_cast<char*>(p.c.pointers[b]);
  return static_cast<char*>(p.c.data) +
         b * p.c.strides.batch * static_cast<int64_t>(DTypeSize(p.c_dtype));
}

// Copies rows [0, rows) x cols [col0, col0 + cols) of a strided BF16 matrix
// into a dense row-major FP32 block.
void WidenBlock(const uint16_t* src, const Strides& strides, int64_t rows,
                int64_t row0, int64_t col0, int64_t cols, float* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* row = src + (row0 + i) * strides.row;
    float* out = dst + i * cols;
    if (strides.col == 1) {
      for (int64_t j = 0; j < cols; ++j) out[j] = Bf16ToFloat(row[col0 + j]);
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        out[j] = Bf16ToFloat(row[(col0 + j) * strides.col]);
      }
    }
  }
}

// C = alpha * acc + beta * C, narrowing to the output dtype.
void Epilogue(const GemmProblem& p, const float* acc, char* c) {
  const int64_t esize = static_cast<int64_t>(DTypeSize(p.c_dtype));
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      char* element = c + (i * p.c.strides.row + j * p.c.strides.col) * esize;
      float value = p.alpha * acc[i * p.n + j];
      if (p.c_dtype == DType::kBF16) {
        uint16_t* out = reinterpret_cast<uint16_t*>(element);
        if (p.beta != 0.0f) value += p.beta * Bf16ToFloat(*out);
        *out = FloatToBf16(value);
      } else {
        float* out = reinterpret_cast<float*>(element);
        if (p.beta != 0.0f) value += p.beta * *out;
        *out = value;
      }
    }
  }
}

}  // namespace

std::unique_ptr<GemmBackend> CpuBackend::Create(int threads_per_product) {
  if (threads_per_product > 0) openblas_set_num_threads(threads_per_product);
  return std::unique_ptr<GemmBackend>(new CpuBackend());
}

std::vector<DeviceInfo> CpuBackend::devices() const {
  DeviceInfo cpu;
  cpu.name = absl::StrCat("cpu (", openblas_get_config(), ")");
  cpu.multiprocessors = static_cast<int>(std::thread::hardware_concurrency());
  return {cpu};
}

absl::StatusOr<GemmRunInfo> CpuBackend::RunHost(const GemmProblem& p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.batch <= 0) {
    return absl::InvalidArgumentError("cpu backend: empty problem");
  }
  const auto start = std::chrono::steady_clock::now();
  const int64_t block_k = std::min(p.k, kBlockK);
  std::vector<float> a_block(static_cast<size_t>(p.m * block_k));
  std::vector<float> b_block(static_cast<size_t>(block_k * p.n));
  std::vector<float> acc(static_cast<size_t>(p.m * p.n));
  for (int64_t b = 0; b < p.batch; ++b) {
    const uint16_t* a = InputBase(p.a, b);
    const uint16_t* bm = InputBase(p.b, b);
    for (int64_t k0 = 0; k0 < p.k; k0 += block_k) {
      const int64_t kb = std::min(block_k, p.k - k0);
      WidenBlock(a, p.a.strides, p.m, 0, k0, kb, a_block.data());
      WidenBlock(bm, p.b.strides, kb, k0, 0, p.n, b_block.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                  static_cast<blasint>(p.m), static_cast<blasint>(p.n),
                  static_cast<blasint>(kb), 1.0f, a_block.data(),
                  static_cast<blasint>(kb), b_block.data(),
                  static_cast<blasint>(p.n), k0 == 0 ? 0.0f : 1.0f, acc.data(),
                  static_cast<blasint>(p.n));
    }
    Epilogue(p, acc.data(), OutputBase(p, b));
  }
  const std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - start;
  return GemmRunInfo{"openblas_sgemm", elapsed.count()};
}

}  // namespace matmul
