// Rounding emulation against independent conversions: the hardware f64→f32 cast, the standard
// f32→bf16 bit recipe (add 0x7fff plus the lowest kept bit, truncate), GCC's _Float16 conversion,
// and hand-checked ties, subnormals and overflow.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "reference/random_matrix.h"
#include "support/rounding.h"

namespace orthojit {
namespace {

float bf16_by_bits(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xffff0000u);
}

std::vector<double> probes() {
  std::vector<double> values = reference::gaussian_values(20000, 7);
  const auto scales = reference::gaussian_values(20000, 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] *= std::ldexp(1.0, static_cast<int>(scales[i] * 12));
  return values;
}

TEST(Rounding, Float32MatchesTheHardwareCast) {
  for (double v : probes()) ASSERT_EQ(round_to(ScalarType::F32, v), static_cast<double>(static_cast<float>(v))) << v;
  EXPECT_EQ(round_to(ScalarType::F32, 1e-45), static_cast<double>(static_cast<float>(1e-45)));  // subnormal
  EXPECT_TRUE(std::isinf(round_to(ScalarType::F32, 4e38)));
}

// Every binade of the double range, random significands, both signs, and the values halfway
// between neighbours of the target (ties) at each exponent: the bit rounding of the normal range,
// its carry into the next binade, the scaled path of the target's subnormals and the overflow
// threshold, each against the hardware's or the compiler's own conversion.
std::vector<double> every_binade() {
  std::vector<double> values;
  const auto significands = reference::gaussian_values(2 * 2046, 11);
  for (int e = -1074; e <= 1023; ++e) {
    const double unit = std::ldexp(1.0, e);
    values.push_back(unit);
    values.push_back(-unit * (1.0 + std::fabs(significands[static_cast<size_t>(e + 1074) % significands.size()]) / 4));
    values.push_back(unit * (2.0 - 0x1p-52));                         // rounds up into the next binade
    values.push_back(unit * (1.0 + 0x1p-24) * (e % 2 == 0 ? 1 : -1));  // f32 tie at this binade
    values.push_back(unit * (1.0 + 0x1p-11));                          // f16 tie, even below
    values.push_back(unit * (1.0 + 3 * 0x1p-11));                      // f16 tie, odd below
    values.push_back(unit * (1.0 + 3 * 0x1p-24));                      // f32 tie, odd below
  }
  return values;
}

TEST(Rounding, Float32MatchesTheHardwareCastOverTheWholeDoubleRange) {
  for (double v : every_binade()) ASSERT_EQ(round_to(ScalarType::F32, v), static_cast<double>(static_cast<float>(v))) << v;
}

#if defined(__FLT16_MAX__)
TEST(Rounding, Float16MatchesTheCompilersConversionOverTheWholeDoubleRange) {
  for (double v : every_binade()) ASSERT_EQ(round_to(ScalarType::F16, v), static_cast<double>(static_cast<_Float16>(v))) << v;
}
#endif

TEST(Rounding, Bfloat16MatchesTheBitRecipeOnFloat32Values) {
  for (double v : probes()) {
    const float f = static_cast<float>(v);  // the recipe converts from f32; one rounding from f32 is exact here
    ASSERT_EQ(round_to(ScalarType::BF16, f), static_cast<double>(bf16_by_bits(f))) << f;
  }
}

TEST(Rounding, Bfloat16TiesGoToEven) {
  EXPECT_EQ(round_to(ScalarType::BF16, 1.0 + 0x1p-8), 1.0);                  // halfway, even below
  EXPECT_EQ(round_to(ScalarType::BF16, 1.0 + 3 * 0x1p-8), 1.0 + 0x1p-6);     // halfway, even above
  EXPECT_EQ(round_to(ScalarType::BF16, 1.0 + 0x1p-8 + 0x1p-30), 1.0 + 0x1p-7);  // just above halfway
  EXPECT_EQ(round_to(ScalarType::BF16, -(1.0 + 0x1p-8)), -1.0);
}

#if defined(__FLT16_MAX__)
TEST(Rounding, Float16MatchesTheCompilersConversion) {
  for (double v : probes()) ASSERT_EQ(round_to(ScalarType::F16, v), static_cast<double>(static_cast<_Float16>(v))) << v;
}
#endif

TEST(Rounding, Float16RangeAndSubnormals) {
  EXPECT_EQ(round_to(ScalarType::F16, 65504.0), 65504.0);
  EXPECT_EQ(round_to(ScalarType::F16, 65519.0), 65504.0);  // below max + ulp/2
  EXPECT_TRUE(std::isinf(round_to(ScalarType::F16, 65520.0)));  // the tie rounds to "even" = infinity
  EXPECT_EQ(round_to(ScalarType::F16, 0x1p-24), 0x1p-24);  // smallest subnormal
  EXPECT_EQ(round_to(ScalarType::F16, 0x1p-25), 0.0);      // tie between 0 and 2^-24 -> even (0)
  EXPECT_EQ(round_to(ScalarType::F16, 3 * 0x1p-26), 0x1p-24);
  EXPECT_EQ(round_to(ScalarType::F16, 1.0 + 0x1p-11), 1.0);
}

TEST(Rounding, SpecialValuesPassThrough) {
  for (auto type : {ScalarType::BF16, ScalarType::F16, ScalarType::F32, ScalarType::F64}) {
    EXPECT_TRUE(std::isnan(round_to(type, std::numeric_limits<double>::quiet_NaN())));
    EXPECT_EQ(round_to(type, std::numeric_limits<double>::infinity()), std::numeric_limits<double>::infinity());
    EXPECT_EQ(round_to(type, 0.0), 0.0);
    EXPECT_EQ(round_to(type, 1.0), 1.0);
  }
}

// round_to_known<T> (inline, for per-element loops) is round_to(T) bit for bit: every binade of the
// double range with its ties and carries (so the targets' subnormals, the largest binade whose
// carry overflows, and the first binade that overflows outright), the random probes, both zeros,
// the infinities and NaN (compared as bits). A wrong bound of its inline range, or a wrong rounding
// constant, fails on the binades around it.
template <ScalarType T>
void expect_known_matches_round_to() {
  std::vector<double> values = every_binade();
  for (double v : probes()) values.push_back(v);
  for (double v : {0.0, -0.0, std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN(), 65504.0, 65520.0, 65519.99, 0x1.fefffffp127, 0x1.ff8p127, 0x1.ffp127})
    values.push_back(v);
  for (double v : values)
    ASSERT_EQ(std::bit_cast<uint64_t>(round_to_known<T>(v)), std::bit_cast<uint64_t>(round_to(T, v))) << to_string(T) << " of " << v;
}

TEST(Rounding, KnownTypeRoundingIsRoundToBitForBit) {
  expect_known_matches_round_to<ScalarType::BF16>();
  expect_known_matches_round_to<ScalarType::F16>();
  expect_known_matches_round_to<ScalarType::F32>();
  expect_known_matches_round_to<ScalarType::F64>();
}

}  // namespace
}  // namespace orthojit
