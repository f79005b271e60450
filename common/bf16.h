// Host-side BF16 <-> FP32 conversion. BF16 is the top half of an IEEE-754
// binary32; we round to nearest even when narrowing, as the GPU does.
#ifndef MATMUL_COMMON_BF16_H_
#define MATMUL_COMMON_BF16_H_

#include <cstdint>
#include <cstring>

namespace matmul {

inline float Bf16ToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

inline uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  }
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

}  // namespace matmul

#endif  // MATMUL_COMMON_BF16_H_
