#include "kernels/cuda/backend/internal/staging.h"

#include <cstring>
#include <utility>

#include "common/status_macros.h"
#include "kernels/cuda/runtime/cuda_status.h"
#include "kernels/cuda/runtime/device_ops.h"

namespace matmul::cuda {
namespace {

const char* EntryPointer(const void* data, const void* const* pointers,
                         int64_t batch_stride, int64_t b, size_t element) {
  if (pointers != nullptr) return static_cast<const char*>(pointers[b]);
  return static_cast<const char*>(data) +
         b * batch_stride * static_cast<int64_t>(element);
}

// True when the device can address `pointer` directly: device, managed or
// registered host memory. Plain pageable host memory is not.
bool DeviceAddressable(const void* pointer) {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return false;
  }
  return attributes.type != cudaMemoryTypeUnregistered;
}

}  // namespace

// Strides a kernel sees for a classified operand (batch stride kept).
Strides NormalizedStrides(const MatrixLayout& c, int64_t batch_stride) {
  if (c.order == MatrixOrder::kColMajor) return {batch_stride, 1, c.ld};
  return {batch_stride, c.ld, 1};
}

// Strides of a dense copy in the given layout.
Strides DenseStrides(MatrixOrder layout, int64_t rows, int64_t cols,
                     bool broadcast) {
  const int64_t batch = broadcast ? 0 : rows * cols;
  if (layout == MatrixOrder::kColMajor) return {batch, 1, rows};
  return {batch, cols, 1};
}

// Copies entry by entry into a dense device copy in `layout` (row-major for
// a strided source). Sources may be host or device memory (unified
// addressing picks the copy direction); a strided source is packed on the
// host, or gathered by a kernel when the device can read it.
absl::Status StageIn(const void* data, const void* const* pointers,
                     const Strides& strides, const MatrixLayout& c,
                     int64_t rows, int64_t cols, int64_t entries,
                     size_t element, char* device, cudaStream_t stream,
                     std::vector<char>& pack) {
  const size_t matrix_bytes = rows * cols * element;
  for (int64_t b = 0; b < entries; ++b) {
    const char* src = EntryPointer(data, pointers, strides.batch, b, element);
    char* dst = device + b * matrix_bytes;
    switch (c.order) {
      case MatrixOrder::kRowMajor:
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(dst, cols * element, src, c.ld * element,
                              cols * element, rows, cudaMemcpyDefault, stream),
            "cudaMemcpy2DAsync(staging in)"));
        break;
      case MatrixOrder::kColMajor:
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(dst, rows * element, src, c.ld * element,
                              rows * element, cols, cudaMemcpyDefault, stream),
            "cudaMemcpy2DAsync(staging in)"));
        break;
      case MatrixOrder::kStrided:
        if (DeviceAddressable(src)) {
          RETURN_IF_ERROR(CopyMatrix(
              {src, nullptr, {0, strides.row, strides.col}},
              {dst, nullptr,
               DenseStrides(MatrixOrder::kRowMajor, rows, cols, true)},
              1, rows, cols, static_cast<int>(element), stream));
          break;
        }
        pack.resize(matrix_bytes);
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            std::memcpy(&pack[(i * cols + j) * element],
                        src + (i * strides.row + j * strides.col) * element,
                        element);
          }
        }
        // From pageable memory the call returns once `pack` has been
        // consumed, so it may be refilled for the next entry.
        RETURN_IF_ERROR(
            CudaStatus(cudaMemcpyAsync(dst, pack.data(), matrix_bytes,
                                       cudaMemcpyHostToDevice, stream),
                       "cudaMemcpyAsync(host to device)"));
        break;
    }
  }
  return absl::OkStatus();
}

// The reverse of StageIn for C: host or device destinations.
absl::Status StageOut(const GemmProblem& p, const MatrixLayout& c,
                      const char* device, cudaStream_t stream,
                      std::vector<char>& pack) {
  const size_t element = DTypeSize(p.c_dtype);
  const size_t matrix_bytes = p.m * p.n * element;
  for (int64_t b = 0; b < p.batch; ++b) {
    char* dst = const_cast<char*>(
        EntryPointer(p.c.data, const_cast<const void* const*>(p.c.pointers),
                     p.c.strides.batch, b, element));
    const char* src = device + b * matrix_bytes;
    switch (c.order) {
      case MatrixOrder::kRowMajor:
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(dst, c.ld * element, src, p.n * element,
                              p.n * element, p.m, cudaMemcpyDefault, stream),
            "cudaMemcpy2DAsync(staging out)"));
        break;
      case MatrixOrder::kColMajor:
        RETURN_IF_ERROR(CudaStatus(
            cudaMemcpy2DAsync(dst, c.ld * element, src, p.m * element,
                              p.m * element, p.n, cudaMemcpyDefault, stream),
            "cudaMemcpy2DAsync(staging out)"));
        break;
      case MatrixOrder::kStrided:
        if (DeviceAddressable(dst)) {
          RETURN_IF_ERROR(
              CopyMatrix({src, nullptr,
                          DenseStrides(MatrixOrder::kRowMajor, p.m, p.n, true)},
                         {dst, nullptr, {0, p.c.strides.row, p.c.strides.col}},
                         1, p.m, p.n, static_cast<int>(element), stream));
          break;
        }
        pack.resize(matrix_bytes);
        RETURN_IF_ERROR(
            CudaStatus(cudaMemcpyAsync(pack.data(), src, matrix_bytes,
                                       cudaMemcpyDeviceToHost, stream),
                       "cudaMemcpyAsync(device to host)"));
        RETURN_IF_ERROR(
            CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
        for (int64_t i = 0; i < p.m; ++i) {
          for (int64_t j = 0; j < p.n; ++j) {
            std::memcpy(
                dst + (i * p.c.strides.row + j * p.c.strides.col) * element,
                &pack[(i * p.n + j) * element], element);
          }
        }
        break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<KernelOperands> KernelOperands::Gather(const GemmProblem& p,
                                                      cudaStream_t stream) {
  KernelOperands out;
  out.original_ = p;
  const MatrixLayout ca = ClassifyLayout(p.a.strides, p.m, p.k);
  const MatrixLayout cb = ClassifyLayout(p.b.strides, p.k, p.n);
  const MatrixLayout cc = ClassifyLayout(p.c.strides, p.m, p.n);
  // Pointer arrays pass through only when all three matrices use them and
  // none needs packing (the kernels' pointer-array mode); otherwise such
  // operands are gathered into dense strided batches.
  const bool all_pointers =
      p.a.pointers != nullptr && p.b.pointers != nullptr &&
      p.c.pointers != nullptr && ca.order != MatrixOrder::kStrided &&
      cb.order != MatrixOrder::kStrided && cc.order != MatrixOrder::kStrided;
  const bool gather_a = ca.order == MatrixOrder::kStrided ||
                        (p.a.pointers != nullptr && !all_pointers);
  const bool gather_b = cb.order == MatrixOrder::kStrided ||
                        (p.b.pointers != nullptr && !all_pointers);
  out.gather_c_ = cc.order == MatrixOrder::kStrided ||
                  (p.c.pointers != nullptr && !all_pointers);
  out.gathered_ = gather_a || gather_b || out.gather_c_;

  GemmProblem& d = out.problem_;
  d = p;
  auto prepare_input = [&](const InputMatrix& in, const MatrixLayout& c,
                           bool gather, int64_t rows, int64_t cols,
                           InputMatrix& to, StreamBuffer& tmp) -> absl::Status {
    const bool broadcast =
        p.batch > 1 && in.pointers == nullptr && in.strides.batch == 0;
    if (!gather) {
      to.strides = NormalizedStrides(c, in.strides.batch);
      return absl::OkStatus();
    }
    const int64_t entries = broadcast ? 1 : p.batch;
    ASSIGN_OR_RETURN(tmp,
                     StreamBuffer::Create(entries * rows * cols * 2, stream));
    to.data = tmp.data();
    to.pointers = nullptr;
    to.strides = DenseStrides(MatrixOrder::kRowMajor, rows, cols, broadcast);
    return CopyMatrix({in.data, in.pointers, in.strides},
                      {tmp.data(), nullptr, to.strides}, entries, rows, cols, 2,
                      stream);
  };
  RETURN_IF_ERROR(prepare_input(p.a, ca, gather_a, p.m, p.k, d.a, out.a_tmp_));
  RETURN_IF_ERROR(prepare_input(p.b, cb, gather_b, p.k, p.n, d.b, out.b_tmp_));

  const int c_element = static_cast<int>(DTypeSize(p.c_dtype));
  if (out.gather_c_) {
    ASSIGN_OR_RETURN(out.c_tmp_, StreamBuffer::Create(
                                     p.batch * p.m * p.n * c_element, stream));
    d.c.data = out.c_tmp_.data();
    d.c.pointers = nullptr;
    d.c.strides = DenseStrides(MatrixOrder::kRowMajor, p.m, p.n, false);
    if (p.beta != 0.0f) {
      RETURN_IF_ERROR(CopyMatrix(
          {p.c.data, const_cast<const void* const*>(p.c.pointers), p.c.strides},
          {d.c.data, nullptr, d.c.strides}, p.batch, p.m, p.n, c_element,
          stream));
    }
  } else {
    d.c.strides = NormalizedStrides(cc, p.c.strides.batch);
  }
  return out;
}

absl::Status KernelOperands::ScatterC(cudaStream_t stream) const {
  if (!gather_c_) return absl::OkStatus();
  const GemmProblem& p = original_;
  return CopyMatrix({problem_.c.data, nullptr, problem_.c.strides},
                    {p.c.data, p.c.pointers, p.c.strides}, p.batch, p.m, p.n,
                    static_cast<int>(DTypeSize(p.c_dtype)), stream);
}

absl::Status KernelOperands::Release(cudaStream_t stream) {
  if (!gathered_) return absl::OkStatus();
  a_tmp_ = StreamBuffer();
  b_tmp_ = StreamBuffer();
  c_tmp_ = StreamBuffer();
  return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace matmul::cuda
