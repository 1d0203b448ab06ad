// Storage element types as the CPU backend holds them (f32, bf16 and f16 bit patterns) and their
// conversions to and from f32 with round-to-nearest-even, as GPU and CPU hardware convert.
//
// The f16 conversions are integer and f32 arithmetic, not casts of _Float16: this library is
// built for baseline x86-64 (no F16C), where GCC turns every _Float16 cast into a call to
// libgcc's soft-float __extendhfsf2 / __truncsfhf2. In the packing loops of the products that
// call cost more than the products themselves (f16 NS5 at 1024x4096 ran 1.9-2.6x slower than
// bf16 before; bench/RESULTS.md, twenty-sixth session). These forms have no calls and no
// data-dependent branches, so the loops around them vectorize; tests/f16_conversion_test.cpp
// checks them against the compiler's _Float16 on every f16 value and on every rounding boundary.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "support/scalar_type.h"

namespace orthojit::cpu {

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

// All ones where `condition` holds, else zero: the f16 conversions select with masks, not
// branches or ternaries, because GCC vectorizes the loops around them only in that form.
inline uint32_t lane_mask(bool condition) { return 0u - static_cast<uint32_t>(condition); }

inline float to_float(float value) { return value; }
inline float to_float(Bf16 value) { return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16); }
// IEEE binary16 -> binary32, exact. The exponent and mantissa move to their f32 places and the
// exponent is rebiased (15 -> 127); an all-ones exponent (infinity, NaN: payload kept) is rebiased
// once more to f32's all-ones; a zero exponent (zero, subnormal m·2^-24) is renormalized by one f32
// subtraction, exact: (1 + m/1024)·2^-14 - 2^-14 = m·2^-24.
inline float to_float(F16 value) {
  const uint32_t shifted = (static_cast<uint32_t>(value.bits) & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t rebiased = shifted + (112u << 23) + (lane_mask(exponent == 0x0f800000u) & (112u << 23));
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(rebiased + (1u << 23)) - std::bit_cast<float>(113u << 23));
  const uint32_t small = lane_mask(exponent == 0);
  const uint32_t sign = (static_cast<uint32_t>(value.bits) & 0x8000u) << 16;
  return std::bit_cast<float>((small & subnormal) | (~small & rebiased) | sign);
}

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
// binary32 -> binary16, round to nearest even (F16C's vcvtps2ph with its default rounding), in
// three ranges of |value| (the method of F. Giesen's public-domain "float_to_half_fast3_rtne"):
//   >= 2^16        infinity, or NaN kept NaN (quiet bit set, the payload's top bits kept);
//   <  2^-14       a subnormal half or zero: adding 0.5, whose f32 ulp is 2^-24 (the half's
//                  subnormal step), makes the FPU round at that step; the sum's low bits are the
//                  half (a carry to 0x400 is the smallest normal, as it should be);
//   otherwise      rebias the exponent (127 -> 15) and round the 13 dropped bits to even by adding
//                  0xfff plus the lowest kept bit; a carry into the exponent is the right result,
//                  up to infinity for |value| >= 65520.
// Each range is computed for every value and one is selected by masks. The f32 addition
// assumes the default rounding mode and no denormals-are-zero, as the library's arithmetic does.
template <>
inline F16 from_float<F16>(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t magnitude = bits & 0x7fffffffu;
  const int32_t ordered = static_cast<int32_t>(magnitude);  // below 2^31: signed compares (SSE2 has no unsigned ones)
  const uint32_t special = 0x7c00u | (lane_mask(ordered > 0x7f800000) & (0x200u | ((magnitude >> 13) & 0x3ffu)));
  const uint32_t half_magic = 126u << 23;  // 0.5f
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + std::bit_cast<float>(half_magic)) - half_magic;
  const uint32_t normal = (magnitude - (112u << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  const uint32_t overflow = lane_mask(ordered >= static_cast<int32_t>(143u << 23)), small = lane_mask(ordered < static_cast<int32_t>(113u << 23));
  const uint32_t result = (overflow & special) | (small & subnormal) | (~(overflow | small) & normal);
  return {static_cast<uint16_t>(result | ((bits >> 16) & 0x8000u))};
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
