// Host side of the TMA kernels (kernels/mma, kernels/hopper): the copy
// engine's descriptors (tensor maps) of one matrix, encoded through the
// driver's cuTensorMapEncodeTiled, which the runtime hands out
// (cudaGetDriverEntryPointByVersion), so that nothing links libcuda
// directly.
#ifndef MATMUL_KERNELS_TMA_TENSOR_MAPS_H_
#define MATMUL_KERNELS_TMA_TENSOR_MAPS_H_

#include <cuda.h>

#include <cstdint>

#include "absl/status/status.h"
#include "common/gemm/gemm_problem.h"

namespace matmul::tma {

// Whether the driver offers the encoder (looked up once).
bool HaveTensorMapEncoder();

// The map of a BF16 matrix stored as `rows` rows of `cols` contiguous
// elements, `ld` elements apart, read in boxes of 64 elements by
// `box_rows` rows with the 128-byte swizzle (the kernels' shared-memory
// panels). `base` and `ld` * 2 must be multiples of 16 bytes.
absl::Status EncodeOperandMap(CUtensorMap* map, const void* base, int64_t cols,
                              int64_t rows, int64_t ld, int box_rows);

// The same for a matrix of `dtype` (BF16 or FP32), in boxes of one 128-byte
// row (64 or 32 elements) by `box_rows` rows; `base` and `ld` times the
// element size must be multiples of 16 bytes.
absl::Status EncodeMatrixMap(CUtensorMap* map, DType dtype, const void* base,
                             int64_t cols, int64_t rows, int64_t ld,
                             int box_rows);

// The map of `batch` such matrices, `batch_stride` elements apart, with a
// third coordinate for the matrix (rank 3; boxes of one matrix). With more
// than one matrix, `batch_stride` times the element size must be a
// multiple of 16 bytes. `rank` 2 leaves the third coordinate out (batch 1).
absl::Status EncodeBatchedMatrixMap(CUtensorMap* map, DType dtype,
                                    const void* base, int64_t cols,
                                    int64_t rows, int64_t ld, int64_t batch,
                                    int64_t batch_stride, int box_rows,
                                    int rank = 3);

}  // namespace matmul::tma

#endif  // MATMUL_KERNELS_TMA_TENSOR_MAPS_H_
