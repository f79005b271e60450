// Moving a product's operands into the form the kernels take, and the
// output back: the kernels (cuBLASLt and the own ones alike) need every
// operand row- or column-major on the device, and pointer arrays on all of
// A, B and C or on none.
//  * StageIn / StageOut: host (or any unified-addressable) memory to and
//    from dense device copies, for RunHost; a strided operand is packed on
//    the host, or gathered by a kernel when the device can read it.
//  * KernelOperands: a problem already on the device whose operands have
//    no unit stride, or pointer arrays on only some of A, B and C, gathered
//    into dense stream-ordered temporaries; C scattered back afterwards.
#ifndef MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_STAGING_H_
#define MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_STAGING_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gemm/gemm_problem.h"
#include "common/gemm/matrix_layout.h"
#include "kernels/cuda/runtime/cuda_resources.h"

namespace matmul::cuda {

// Strides a kernel sees for a classified row- or column-major operand
// (batch stride kept).
Strides NormalizedStrides(const MatrixLayout& c, int64_t batch_stride);

// Strides of a dense copy in the given layout; batch stride 0 when
// `broadcast`.
Strides DenseStrides(MatrixOrder layout, int64_t rows, int64_t cols,
                     bool broadcast);

// Copies `entries` matrices (data + batch stride, or pointer arrays) of
// rows x cols elements of `element` bytes into a dense device copy at
// `device`, in the source's layout (row-major for a strided source).
// `pack` is host scratch space, reused between calls.
absl::Status StageIn(const void* data, const void* const* pointers,
                     const Strides& strides, const MatrixLayout& c,
                     int64_t rows, int64_t cols, int64_t entries,
                     size_t element, char* device, cudaStream_t stream,
                     std::vector<char>& pack);

// The reverse of StageIn for `p`'s C (classified as `c`) from the dense
// device copy at `device`.
absl::Status StageOut(const GemmProblem& p, const MatrixLayout& c,
                      const char* device, cudaStream_t stream,
                      std::vector<char>& pack);

class KernelOperands {
 public:
  // Queues the gathers `p` needs on `stream` (none when its operands are
  // already in a form the kernels take).
  static absl::StatusOr<KernelOperands> Gather(const GemmProblem& p,
                                               cudaStream_t stream);

  // The problem the kernel runs.
  const GemmProblem& problem() const { return problem_; }
  // True when anything was gathered: the product reads work queued on the
  // stream before it.
  bool gathered() const { return gathered_; }
  // True when C was gathered and must be scattered back (ScatterC).
  bool scatters_c() const { return gather_c_; }
  // Queues the scatter of a gathered C back to the original strides.
  absl::Status ScatterC(cudaStream_t stream) const;
  // Frees the temporaries in stream order and waits for the stream.
  absl::Status Release(cudaStream_t stream);

 private:
  GemmProblem original_;
  GemmProblem problem_;
  bool gathered_ = false;
  bool gather_c_ = false;
  StreamBuffer a_tmp_, b_tmp_, c_tmp_;
};

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_BACKEND_INTERNAL_STAGING_H_
