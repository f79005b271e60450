// Several independent products run as one pointer-array launch: the dynamic
// batcher's unit of work. Products can share a launch when they agree on
// everything but their pointers (see BatchKey); each contributes one entry
// per matrix of its own batch, so a bmm request or a broadcast operand
// joins like any other.
#ifndef MATMUL_KERNELS_GEMM_BATCH_H_
#define MATMUL_KERNELS_GEMM_BATCH_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/gemm/gemm_problem.h"

namespace matmul {

// Equal for two problems exactly when they can share a launch: M, N, K,
// the row and column strides of A, B and C, the output dtype, alpha and
// beta (bit-exact). Batch sizes and pointers may differ.
std::string BatchKey(const GemmProblem& problem);

// The largest power of two up to 16 that divides every address: what a
// pointer array's pointer_alignment says of its entries.
int CommonAlignment(absl::Span<const void* const> pointers);

// A pointer-array problem over several products, owning its arrays (host
// memory). Movable, not copyable: `problem` points into the vectors.
class CombinedProblem {
 public:
  // INVALID_ARGUMENT when `parts` is empty or two of them have different
  // BatchKeys. Pointer arrays in a part are read on the host.
  static absl::StatusOr<CombinedProblem> Combine(
      absl::Span<const GemmProblem* const> parts);

  CombinedProblem(CombinedProblem&&) = default;
  CombinedProblem& operator=(CombinedProblem&&) = default;

  // batch = the sum of the parts' batches; a, b and c use `pointers`.
  const GemmProblem& problem() const { return problem_; }
  const std::vector<const void*>& a_pointers() const { return a_; }
  const std::vector<const void*>& b_pointers() const { return b_; }
  const std::vector<void*>& c_pointers() const { return c_; }

 private:
  CombinedProblem() = default;

  GemmProblem problem_;
  std::vector<const void*> a_;
  std::vector<const void*> b_;
  std::vector<void*> c_;
};

}  // namespace matmul

#endif  // MATMUL_KERNELS_GEMM_BATCH_H_
