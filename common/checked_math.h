// 64-bit size arithmetic that says when it overflows, for the extents and
// byte counts computed from client-supplied dimensions and strides.
#ifndef MATMUL_COMMON_CHECKED_MATH_H_
#define MATMUL_COMMON_CHECKED_MATH_H_

#include <cstdint>

namespace matmul {

// *out = a * b; true (and *out unspecified) when that overflows int64_t.
inline bool MulOverflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

// *out = a + b; true (and *out unspecified) when that overflows int64_t.
inline bool AddOverflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace matmul

#endif  // MATMUL_COMMON_CHECKED_MATH_H_
