#include "kernels/tma/tensor_maps.h"

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace matmul::tma {
namespace {

using EncodeFn = decltype(&cuTensorMapEncodeTiled);

// The driver's encoder, or null where the driver lacks it.
EncodeFn Encoder() {
  static const EncodeFn fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry,
                                         12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // do not leave the failure for the next caller
      return EncodeFn{nullptr};
    }
    return reinterpret_cast<EncodeFn>(entry);
  }();
  return fn;
}

}  // namespace

bool HaveTensorMapEncoder() { return Encoder() != nullptr; }

absl::Status EncodeOperandMap(CUtensorMap* map, const void* base, int64_t cols,
                              int64_t rows, int64_t ld, int box_rows) {
  return EncodeMatrixMap(map, DType::kBF16, base, cols, rows, ld, box_rows);
}

absl::Status EncodeMatrixMap(CUtensorMap* map, DType dtype, const void* base,
                             int64_t cols, int64_t rows, int64_t ld,
                             int box_rows) {
  return EncodeBatchedMatrixMap(map, dtype, base, cols, rows, ld, 1, 0,
                                box_rows, /*rank=*/2);
}

absl::Status EncodeBatchedMatrixMap(CUtensorMap* map, DType dtype,
                                    const void* base, int64_t cols,
                                    int64_t rows, int64_t ld, int64_t batch,
                                    int64_t batch_stride, int box_rows,
                                    int rank) {
  const EncodeFn encode = Encoder();
  if (encode == nullptr) {
    return absl::FailedPreconditionError(
        "the CUDA driver offers no cuTensorMapEncodeTiled");
  }
  const size_t element_bytes = DTypeSize(dtype);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols),
                              static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batch)};
  // A single matrix's stride is never stepped over: any the encoder takes
  // (a multiple of 16 bytes) does.
  const int64_t matrix_bytes =
      batch > 1
          ? batch_stride * static_cast<int64_t>(element_bytes)
          : (rows * ld * static_cast<int64_t>(element_bytes) + 15) / 16 * 16;
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld) * element_bytes,
                                 static_cast<cuuint64_t>(matrix_bytes)};
  // A box row is one 128-byte swizzle row, of one matrix.
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / element_bytes),
                             static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(
      map,
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
      rank, const_cast<void*>(base), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return absl::InternalError(absl::StrCat(
        "cuTensorMapEncodeTiled failed (CUresult ", static_cast<int>(r),
        ") for ", batch, " x ", rows, " x ", cols, " ", DTypeName(dtype),
        " elements, leading dimension ", ld, ", matrices ", batch_stride,
        " apart"));
  }
  return absl::OkStatus();
}

}  // namespace matmul::tma
