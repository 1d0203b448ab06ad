// The CPU backend's f16 conversions (cpu/element_types.h: integer and f32 arithmetic, no
// _Float16 casts) against GCC's own _Float16 conversions (libgcc's soft-float routines, or F16C
// where the compiler may use it): every f16 value one way; the other way every f16 value, every
// midpoint between neighbours (the ties, where round-to-even decides), one f32 ulp either side
// of each, the overflow and subnormal thresholds, and a sweep over the whole f32 range.
// Bit-for-bit, signs of zero included; a NaN must stay a NaN of the same sign.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/element_types.h"

#if defined(__FLT16_MAX__)
namespace orthojit::cpu {
namespace {

uint16_t reference_half(float value) { return std::bit_cast<uint16_t>(static_cast<_Float16>(value)); }
float reference_float(uint16_t bits) { return static_cast<float>(std::bit_cast<_Float16>(bits)); }
bool is_nan_half(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0; }

// Success when the conversion of `value` agrees with the compiler's (a NaN: any NaN of the same sign), else what differs.
::testing::AssertionResult same_half(float value) {
  const uint16_t expected = reference_half(value), got = from_float<F16>(value).bits;
  if (is_nan_half(expected) ? is_nan_half(got) && (got & 0x8000u) == (expected & 0x8000u) : got == expected)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << std::hexfloat << value << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(value)
                                       << "): got 0x" << got << ", the compiler's 0x" << expected;
}

TEST(F16Conversion, EveryHalfWidensExactly) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const float expected = reference_float(static_cast<uint16_t>(bits)), got = to_float(F16{static_cast<uint16_t>(bits)});
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
      ASSERT_EQ(std::signbit(got), std::signbit(expected)) << std::hex << bits;
      // The payload is kept (its top ten bits are the half's mantissa).
      ASSERT_EQ((std::bit_cast<uint32_t>(got) >> 13) & 0x1ffu, bits & 0x1ffu) << std::hex << bits;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected)) << std::hex << bits;
    }
  }
}

TEST(F16Conversion, EveryHalfAndEveryTieRoundsAsTheCompiler) {
  for (uint32_t bits = 0; bits < 0x7c00u; ++bits) {  // the finite positive halves; negatives below
    const float here = to_float(F16{static_cast<uint16_t>(bits)});
    const float next = bits + 1 < 0x7c00u ? to_float(F16{static_cast<uint16_t>(bits + 1)}) : 65536.0f;  // 65536: where infinity's tie sits
    const float middle = here + (next - here) / 2;  // exact: halves have 11 significant bits
    for (float value : {here, middle, std::nextafter(middle, 0.0f), std::nextafter(middle, 1e30f)}) {
      ASSERT_TRUE(same_half(value));
      ASSERT_TRUE(same_half(-value));
    }
  }
}

TEST(F16Conversion, ThresholdsAndSpecialValues) {
  const float infinity = std::numeric_limits<float>::infinity();
  for (float value : {0.0f, 65504.0f, 65519.996f, 65520.0f, 65535.996f, 65536.0f, 1e10f, std::numeric_limits<float>::max(), infinity,
                      0x1p-14f, std::nextafter(0x1p-14f, 0.0f), 0x1p-24f, 0x1p-25f, std::nextafter(0x1p-25f, 1.0f), 0x1p-26f,
                      std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(), 1.0f, std::nextafter(1.0f, 2.0f)}) {
    EXPECT_TRUE(same_half(value));
    EXPECT_TRUE(same_half(-value));
  }
  EXPECT_EQ(from_float<F16>(65520.0f).bits, 0x7c00u);  // the tie above the largest half goes to infinity
  EXPECT_EQ(from_float<F16>(-0.0f).bits, 0x8000u);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0xffc00000u, 0x7f802000u}) {
    const uint16_t half = from_float<F16>(std::bit_cast<float>(nan)).bits;
    EXPECT_TRUE(is_nan_half(half)) << std::hex << nan << " -> " << half;  // a payload in the dropped bits alone must not become infinity
    EXPECT_EQ(half & 0x8000u, (nan >> 16) & 0x8000u) << std::hex << nan;
  }
}

// Every 251st f32 bit pattern (a prime stride, so every exponent and many mantissa residues are
// seen), about 17 million values, both signs.
TEST(F16Conversion, SweepOverTheWholeFloatRange) {
  int64_t checked = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 251) {
    ASSERT_TRUE(same_half(std::bit_cast<float>(static_cast<uint32_t>(bits))));
    ++checked;
  }
  EXPECT_GT(checked, 17'000'000);
}

// What the packing loops do with the conversions: many values at once, unit stride (the form the
// compiler vectorizes), the same bits as one at a time through the compiler's conversion.
TEST(F16Conversion, LoopsOverArraysAgreeWithTheCompiler) {
  std::vector<uint16_t> halves(1 << 16);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i * 40503u);  // every value, shuffled
  std::vector<float> widened(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) widened[i] = to_float(F16{halves[i]});
  std::vector<uint16_t> narrowed(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) narrowed[i] = from_float<F16>(widened[i] * 1.37f).bits;
  for (size_t i = 0; i < halves.size(); ++i) {
    if (is_nan_half(halves[i])) continue;
    ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), std::bit_cast<uint32_t>(reference_float(halves[i]))) << i;
    ASSERT_EQ(narrowed[i], reference_half(reference_float(halves[i]) * 1.37f)) << i;
  }
}

}  // namespace
}  // namespace orthojit::cpu
#else
TEST(F16Conversion, NeedsACompilerWithFloat16) { GTEST_SKIP() << "this compiler has no _Float16 to check against"; }
#endif
