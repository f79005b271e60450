#include "kernels/cuda/selector/internal/selector_key.h"

#include "absl/strings/str_cat.h"
#include "common/gemm/matrix_layout.h"

namespace matmul::cuda {
namespace {

// What a canonical problem's a/b/c.pointers point at to say "pointer-array
// mode" (the batcher's launches): the arrays themselves are built by
// TimingOperands. Never dereferenced.
void* const kPointerArrayMode[1] = {nullptr};

bool PointerArrays(const GemmProblem& p) { return p.a.pointers != nullptr; }

bool Broadcast(const GemmProblem& p, const InputMatrix& x) {
  return p.batch > 1 && x.pointers == nullptr && x.strides.batch == 0;
}

// Batch sizes share a key by the power of two at or above them: the dynamic
// batcher produces every size up to its maximum, and tuning each one would
// keep the GPU busy with timing instead of serving.
int64_t BatchBucket(int64_t batch) {
  int64_t bucket = 1;
  while (bucket < batch) bucket *= 2;
  return bucket;
}

}  // namespace

GemmProblem CanonicalProblem(const GemmProblem& p) {
  GemmProblem c;
  c.batch = BatchBucket(p.batch);
  c.m = p.m;
  c.n = p.n;
  c.k = p.k;
  c.c_dtype = p.c_dtype;
  if (LayoutTagA(p) == 'T') {
    c.a.strides = {p.m * p.k, 1, p.m};
  } else {
    c.a.strides = {p.m * p.k, p.k, 1};
  }
  if (LayoutTagB(p) == 'T') {
    c.b.strides = {p.k * p.n, 1, p.k};
  } else {
    c.b.strides = {p.k * p.n, p.n, 1};
  }
  if (Broadcast(p, p.a)) c.a.strides.batch = 0;
  if (Broadcast(p, p.b)) c.b.strides.batch = 0;
  c.c.strides = {p.m * p.n, p.n, 1};
  // Pointer-array launches are tuned as such: kernels (cuBLASLt's above
  // all) differ between the two modes, and so do their candidate lists.
  if (PointerArrays(p)) {
    c.a.pointers = kPointerArrayMode;
    c.b.pointers = kPointerArrayMode;
    c.c.pointers = kPointerArrayMode;
  }
  return c;
}

std::string SelectorKey(const GemmProblem& p) {
  std::string key =
      absl::StrCat(p.m, "x", p.n, "x", p.k, ":", std::string(1, LayoutTagA(p)),
                   std::string(1, LayoutTagB(p)), ":", DTypeName(p.c_dtype),
                   ":b", BatchBucket(p.batch));
  if (Broadcast(p, p.a)) absl::StrAppend(&key, ":bcastA");
  if (Broadcast(p, p.b)) absl::StrAppend(&key, ":bcastB");
  if (PointerArrays(p)) absl::StrAppend(&key, ":ptr");
  return key;
}

}  // namespace matmul::cuda
