// A product list as the backends take it: products that run in order, one
// after the other, where a later product may read what an earlier one
// wrote (in a client's memory or in the list's scratch) and accumulate
// into it (beta != 0). Scratch is memory the backend provides for the
// list's lifetime; the server lays it out and says which operand points
// where in it, and the backend sets those pointers once it has the memory.
#ifndef MATMUL_KERNELS_GEMM_LIST_H_
#define MATMUL_KERNELS_GEMM_LIST_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/gemm/gemm_problem.h"

namespace matmul {

// An operand of one product that lies in the list's scratch.
struct ScratchOperand {
  enum class Which : uint8_t { kA, kB, kC };
  size_t product = 0;
  Which operand = Which::kA;
  int64_t offset_bytes = 0;  // from the start of the scratch
};

// Scratch starts and buffers in it are aligned to this, as cudaMalloc
// aligns allocations.
inline constexpr int64_t kScratchAlignment = 256;

struct GemmList {
  // In order. Scratch operands have null data pointers until
  // WithScratch; no product carries a stream order of its own.
  std::vector<GemmProblem> products;
  std::vector<ScratchOperand> scratch;
  int64_t scratch_bytes = 0;
  // The whole list's, when stream-ordered (a GPU backend only): waited for
  // before the first product, signalled after the last.
  const StreamOrder* stream_order = nullptr;
};

// The products of `list` with their scratch operands pointing into
// `scratch` (kScratchAlignment-aligned, at least list.scratch_bytes).
std::vector<GemmProblem> WithScratch(const GemmList& list, void* scratch);

// `status` with its message prefixed "product i: ": every error of a list,
// from validation to the backend's run, names the product at fault.
absl::Status InProduct(size_t product, const absl::Status& status);

// Each product's kernel seconds when only the whole list was timed: the
// list's time shared by FLOPs.
std::vector<double> ShareByFlops(const std::vector<GemmProblem>& products,
                                 double seconds);

}  // namespace matmul

#endif  // MATMUL_KERNELS_GEMM_LIST_H_
