// The description of one (batched) GEMM that every backend consumes:
//   C[b] = alpha * A[b] * B[b] + beta * C[b],   b in [0, batch)
// with A[b] viewed as [m, k], B[b] as [k, n] and C[b] as [m, n]. Transposes
// are folded into the strides, as in the seed kernel (stride_am/stride_ak):
// a transposed operand simply has row_stride 1 and a large col_stride.
// Knows nothing of gRPC; the server builds it from a validated request.
#ifndef MATMUL_COMMON_GEMM_GEMM_PROBLEM_H_
#define MATMUL_COMMON_GEMM_GEMM_PROBLEM_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/gemm/stream_order.h"

namespace matmul {

enum class DType : uint8_t { kBF16, kFP32 };

inline size_t DTypeSize(DType dtype) { return dtype == DType::kBF16 ? 2 : 4; }
inline const char* DTypeName(DType dtype) {
  return dtype == DType::kBF16 ? "bf16" : "fp32";
}

// Strides are in elements. Element (b, i, j) of an operand lives at
//   data + b * batch_stride + i * row_stride + j * col_stride.
// batch_stride 0 broadcasts one matrix over the batch.
struct Strides {
  int64_t batch = 0;
  int64_t row = 0;
  int64_t col = 0;
};

struct InputMatrix {
  const void* data = nullptr;  // BF16
  Strides strides;
  // Pointer-array batched mode (used by the batcher): when non-null, entry b
  // of the batch starts at pointers[b] and strides.batch is ignored. The
  // array must be readable by the device that runs the product.
  const void* const* pointers = nullptr;
  // With pointers: the alignment in bytes (1..16) that every entry has,
  // when the caller knows it; 0 assumes only element alignment (the
  // entries may be invisible to the host). Fast kernels need 16.
  int pointer_alignment = 0;
};

struct OutputMatrix {
  void* data = nullptr;  // BF16 or FP32 (GemmProblem::c_dtype)
  Strides strides;
  void* const* pointers = nullptr;  // as InputMatrix::pointers
  int pointer_alignment = 0;        // as InputMatrix::pointer_alignment
};

struct GemmProblem {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  InputMatrix a;   // [m, k]
  InputMatrix b;   // [k, n]
  OutputMatrix c;  // [m, n]; read when beta != 0, always written
  DType c_dtype = DType::kBF16;
  float alpha = 1.0f;
  float beta = 0.0f;
  // Set for a stream-ordered product (a GPU backend only); owned by the
  // caller.
  const StreamOrder* stream_order = nullptr;

  double flops() const { return 2.0 * batch * m * n * k; }
};

}  // namespace matmul

#endif  // MATMUL_COMMON_GEMM_GEMM_PROBLEM_H_
