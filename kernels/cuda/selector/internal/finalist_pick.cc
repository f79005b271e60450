#include "kernels/cuda/selector/internal/finalist_pick.h"

namespace matmul::cuda {

size_t PickFinalist(absl::Span<const FinalistTime> finalists,
                    double own_kernel_margin) {
  size_t fastest = 0;
  for (size_t i = 1; i < finalists.size(); ++i) {
    if (finalists[i].median_seconds < finalists[fastest].median_seconds) {
      fastest = i;
    }
  }
  if (finalists[fastest].cublaslt) return fastest;
  const double own = finalists[fastest].median_seconds;
  for (size_t i = 0; i < finalists.size(); ++i) {
    if (finalists[i].cublaslt &&
        finalists[i].median_seconds <= own * (1.0 + own_kernel_margin)) {
      return i;
    }
  }
  return fastest;
}

}  // namespace matmul::cuda
