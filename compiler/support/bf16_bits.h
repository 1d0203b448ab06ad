// bf16 as its 16 bits, for host code that fills or reads device buffers (tests, benchmarks):
// round-to-nearest-even from f32 (finite values; NaN is not needed there) and the exact value back.
#pragma once

#include <cstdint>
#include <cstring>

namespace orthojit {

inline uint16_t bf16_bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline double bf16_value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

}  // namespace orthojit
