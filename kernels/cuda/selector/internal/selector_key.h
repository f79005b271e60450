// What the selector tunes by: a key names a problem's shape, operand
// layouts, output dtype, batch bucket, broadcast flags and launch mode
// (strided or pointer arrays), e.g. "5120x2048x2048:NT:bf16:b1"; every
// problem with that key gets the kernel tuned on its canonical problem.
// Keys are stored in tuning caches: changing them orphans every cache.
#ifndef MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_SELECTOR_KEY_H_
#define MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_SELECTOR_KEY_H_

#include <string>

#include "common/gemm/gemm_problem.h"

namespace matmul::cuda {

// "MxNxK:LL:dtype:bB[:bcastA][:bcastB][:ptr]": LL the operand layouts
// (LayoutTagA/B), B the batch rounded up to a power of two.
std::string SelectorKey(const GemmProblem& problem);

// The canonical dense problem for `problem`'s key: same shape, layouts,
// dtype, batch bucket, broadcast flags and launch mode; null data
// pointers (a pointer-array problem keeps non-null placeholder arrays that
// say so and are never dereferenced); alpha 1, beta 0.
GemmProblem CanonicalProblem(const GemmProblem& problem);

}  // namespace matmul::cuda

#endif  // MATMUL_KERNELS_CUDA_SELECTOR_INTERNAL_SELECTOR_KEY_H_
