#include "kernels/gemm_batch.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace matmul {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

const void* Entry(const void* data, const void* const* pointers,
                  int64_t batch_stride, int64_t b, size_t element) {
  if (pointers != nullptr) return pointers[b];
  return static_cast<const char*>(data) +
         b * batch_stride * static_cast<int64_t>(element);
}

}  // namespace

int CommonAlignment(absl::Span<const void* const> pointers) {
  uintptr_t bits = 16;
  for (const void* pointer : pointers) {
    bits |= reinterpret_cast<uintptr_t>(pointer);
  }
  return static_cast<int>(bits & -bits);
}

std::string BatchKey(const GemmProblem& p) {
  return absl::StrCat(p.m, "x", p.n, "x", p.k, "|a", p.a.strides.row, ",",
                      p.a.strides.col, "|b", p.b.strides.row, ",",
                      p.b.strides.col, "|c", p.c.strides.row, ",",
                      p.c.strides.col, "|", DTypeName(p.c_dtype), "|",
                      FloatBits(p.alpha), ",", FloatBits(p.beta));
}

absl::StatusOr<CombinedProblem> CombinedProblem::Combine(
    absl::Span<const GemmProblem* const> parts) {
  if (parts.empty()) {
    return absl::InvalidArgumentError("no products to combine");
  }
  const std::string key = BatchKey(*parts[0]);
  CombinedProblem combined;
  for (const GemmProblem* part : parts) {
    if (BatchKey(*part) != key) {
      return absl::InvalidArgumentError(absl::StrCat("products ", key, " and ",
                                                     BatchKey(*part),
                                                     " cannot share a launch"));
    }
    const size_t c_element = DTypeSize(part->c_dtype);
    for (int64_t b = 0; b < part->batch; ++b) {
      combined.a_.push_back(
          Entry(part->a.data, part->a.pointers, part->a.strides.batch, b, 2));
      combined.b_.push_back(
          Entry(part->b.data, part->b.pointers, part->b.strides.batch, b, 2));
      combined.c_.push_back(const_cast<void*>(
          Entry(part->c.data, const_cast<const void* const*>(part->c.pointers),
                part->c.strides.batch, b, c_element)));
    }
  }
  GemmProblem& p = combined.problem_;
  p = *parts[0];
  p.batch = static_cast<int64_t>(combined.a_.size());
  p.a.data = p.b.data = nullptr;
  p.c.data = nullptr;
  p.a.strides.batch = p.b.strides.batch = p.c.strides.batch = 0;
  p.a.pointers = combined.a_.data();
  p.b.pointers = combined.b_.data();
  p.c.pointers = combined.c_.data();
  p.a.pointer_alignment = CommonAlignment(combined.a_);
  p.b.pointer_alignment = CommonAlignment(combined.b_);
  const std::vector<const void*> c_entries(combined.c_.begin(),
                                           combined.c_.end());
  p.c.pointer_alignment = CommonAlignment(c_entries);
  return combined;
}

}  // namespace matmul
