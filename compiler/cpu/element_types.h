// Storage element types as the CPU backend holds them (f32, bf16 and f16 bit patterns) and their
// conversions to and from f32 with round-to-nearest-even, as GPU and CPU hardware convert (f16:
// support/f16_bits.h, without libgcc calls).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "support/f16_bits.h"
#include "support/scalar_type.h"

namespace orthojit::cpu {

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float to_float(float value) { return value; }
inline float to_float(Bf16 value) { return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16); }
inline float to_float(F16 value) { return f16_bits_to_float(value.bits); }

template <typename T>
T from_float(float value);
template <>
inline float from_float<float>(float value) {
  return value;
}
template <>
inline Bf16 from_float<Bf16>(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((bits >> 16) | 0x40)};  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // ties to even
  return {static_cast<uint16_t>(bits >> 16)};
}
template <>
inline F16 from_float<F16>(float value) {
  return {f16_bits_of(value)};
}

// Calls f(T{}) with the C++ type that holds `type` (float, Bf16, F16): one switch outside a loop
// instead of one per element. f64 is the reference interpreter's, never stored by this backend.
template <typename F>
void dispatch_storage_type(ScalarType type, F&& f) {
  switch (type) {
    case ScalarType::F32: f(float{}); return;
    case ScalarType::BF16: f(Bf16{}); return;
    case ScalarType::F16: f(F16{}); return;
    case ScalarType::F64: break;
  }
  throw std::logic_error("cpu backend: f64 storage is not supported (use the reference backend)");
}

}  // namespace orthojit::cpu
