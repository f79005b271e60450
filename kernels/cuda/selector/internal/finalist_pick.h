// Which kernel the selector keeps for a key, from its finalists: the best
// of each candidate group, timed interleaved (gemm_selector.h). The fastest
// wins, except that an own kernel takes the place of cuBLASLt's finalist
// only when it is faster by more than a margin: the finalists' times come
// from short bursts, and a burst tie can turn into a loss at the GPU's
// power cap, where a daemon runs; cuBLASLt, NVIDIA's own, is kept on a tie.
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_FINALIST_PICK_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_FINALIST_PICK_H_

#include <cstddef>

#include "absl/types/span.h"

namespace matmul::cuda {

struct FinalistTime {
  bool cublaslt = false;  // cuBLASLt's finalist (else an own kernel)
  double median_seconds = 0.0;
};

// The index of the finalist to keep; `finalists` is not empty. An own
// kernel is kept over cuBLASLt's finalist only where cuBLASLt's time is
// more than (1 + own_kernel_margin) times its own.
size_t PickFinalist(absl::Span<const FinalistTime> finalists,
                    double own_kernel_margin);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_FINALIST_PICK_H_
