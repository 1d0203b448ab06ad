// IEEE binary16 (f16) as its 16 bits, to and from f32, round-to-nearest-even: for host loops
// (the CPU backend's packing and epilogues, the optimizer's element rules).
//
// Integer and f32 arithmetic, not casts of _Float16: the library is built for baseline x86-64 (no
// F16C), where GCC turns every _Float16 cast into a call to libgcc's soft-float __extendhfsf2 /
// __truncsfhf2 (about 6 ns per element). In the packing loops of the products those calls cost
// more than the products (f16 NS5 at 1024x4096 ran 2-2.6x slower than bf16; bench/RESULTS.md,
// twenty-sixth session). These forms have no calls and no data-dependent branches, so the loops
// around them vectorize; tests/f16_conversion_test.cpp checks them bit for bit against the
// compiler's _Float16 on every f16 value and on every rounding boundary.
#pragma once

#include <bit>
#include <cstdint>

namespace orthojit {

// All ones where `condition` holds, else zero: the f16 conversions select with masks, not
// branches or ternaries, because GCC vectorizes the loops around them only in that form.
inline uint32_t f16_lane_mask(bool condition) { return 0u - static_cast<uint32_t>(condition); }

// IEEE binary16 -> binary32, exact. The exponent and mantissa move to their f32 places and the
// exponent is rebiased (15 -> 127); an all-ones exponent (infinity, NaN: payload kept) is rebiased
// once more to f32's all-ones; a zero exponent (zero, subnormal m·2^-24) is renormalized by one f32
// subtraction, exact: (1 + m/1024)·2^-14 - 2^-14 = m·2^-24.
inline float f16_bits_to_float(uint16_t half) {
  const uint32_t shifted = (static_cast<uint32_t>(half) & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t rebiased = shifted + (112u << 23) + (f16_lane_mask(exponent == 0x0f800000u) & (112u << 23));
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(rebiased + (1u << 23)) - std::bit_cast<float>(113u << 23));
  const uint32_t small = f16_lane_mask(exponent == 0);
  const uint32_t sign = (static_cast<uint32_t>(half) & 0x8000u) << 16;
  return std::bit_cast<float>((small & subnormal) | (~small & rebiased) | sign);
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
inline uint16_t f16_bits_of(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t magnitude = bits & 0x7fffffffu;
  const int32_t ordered = static_cast<int32_t>(magnitude);  // below 2^31: signed compares (SSE2 has no unsigned ones)
  const uint32_t special = 0x7c00u | (f16_lane_mask(ordered > 0x7f800000) & (0x200u | ((magnitude >> 13) & 0x3ffu)));
  const uint32_t half_magic = 126u << 23;  // 0.5f
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + std::bit_cast<float>(half_magic)) - half_magic;
  const uint32_t normal = (magnitude - (112u << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  const uint32_t overflow = f16_lane_mask(ordered >= static_cast<int32_t>(143u << 23)), small = f16_lane_mask(ordered < static_cast<int32_t>(113u << 23));
  const uint32_t result = (overflow & special) | (small & subnormal) | (~(overflow | small) & normal);
  return static_cast<uint16_t>(result | ((bits >> 16) & 0x8000u));
}

}  // namespace orthojit
