#include "server/inline_operands.h"

#include <cstdint>
#include <cstring>

namespace matmul {

InlineOperands::InlineOperands(const MatmulPlan& plan,
                               const v1::MatmulRequest& request)
    : problem_(plan.problem) {
  problem_.a.data = Aligned(request.a().inline_data(), &a_copy_);
  problem_.b.data = Aligned(request.b().inline_data(), &b_copy_);
  output_.resize(static_cast<size_t>(plan.output_bytes));
  problem_.c.data = output_.data();
  if (!plan.c || problem_.beta == 0.0f) return;

  // Gather the strided initial C into the dense output, where the epilogue
  // reads it back for beta * C.
  const CheckedTensor& c = *plan.c;
  const size_t esize = DTypeSize(c.dtype);
  const char* src = request.c().inline_data().data();
  char* dst = output_.data();
  for (int64_t b = 0; b < problem_.batch; ++b) {
    for (int64_t i = 0; i < problem_.m; ++i) {
      for (int64_t j = 0; j < problem_.n; ++j) {
        const int64_t offset =
            b * c.strides.batch + i * c.strides.row + j * c.strides.col;
        std::memcpy(dst, src + offset * esize, esize);
        dst += esize;
      }
    }
  }
}

const void* InlineOperands::Aligned(const std::string& bytes,
                                    std::vector<uint32_t>* copy) {
  // Protobuf strings are heap buffers and normally aligned; copy otherwise
  // so the backends may load whole elements.
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint32_t) == 0) {
    return bytes.data();
  }
  copy->resize((bytes.size() + sizeof(uint32_t) - 1) / sizeof(uint32_t));
  std::memcpy(copy->data(), bytes.data(), bytes.size());
  return copy->data();
}

}  // namespace matmul
