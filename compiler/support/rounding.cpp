// Exact round-to-nearest-even to narrower binary formats.
//
// Why not (float)x then to bf16: rounding twice (f64 -> f32 -> bf16) can differ from one correct
// rounding; hardware that converts f32 accumulators to bf16 rounds once from f32, and the
// interpreter rounds once from the exact f64 value. So this rounds the significand bits to nearest
// even where the target is normal, and for its subnormals scales by the fixed quantum and uses
// nearbyint (ties-to-even in the default rounding mode).
#include "support/rounding.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace orthojit {
namespace {

struct BinaryFormat {
  int significand_bits;  // including the implicit leading bit
  int min_exponent;      // exponent of the smallest normal number
  int max_exponent;      // exponent of the largest finite number
};

BinaryFormat format_of(ScalarType type) {
  switch (type) {
    case ScalarType::BF16: return {8, -126, 127};
    case ScalarType::F16: return {11, -14, 15};
    case ScalarType::F32: return {24, -126, 127};
    case ScalarType::F64: return {53, -1022, 1023};
  }
  return {53, -1022, 1023};
}

}  // namespace

double round_to(ScalarType type, double x) {
  if (type == ScalarType::F64 || x == 0.0 || !std::isfinite(x)) return x;
  const BinaryFormat format = format_of(type);
  // In the target's normal range the quantum is x's own, 2^(e - (p - 1)): round-to-nearest-even
  // on the bits, dropping the low 53 - p significand bits (a carry into the exponent is the
  // rounding up to the next binade). The same value as the scaling below, without its ilogb,
  // three ldexp and nearbyint calls: those were 16% of tuning a 1024x4096 shape (the f64
  // reference of every candidate's check rounds every element it stores).
  uint64_t bits = std::bit_cast<uint64_t>(x);
  const int biased_exponent = static_cast<int>((bits >> 52) & 0x7ff);
  if (biased_exponent != 0 && biased_exponent - 1023 >= format.min_exponent) {
    const int dropped = 53 - format.significand_bits;
    if (dropped == 0) return x;
    bits += (uint64_t{1} << (dropped - 1)) - 1 + ((bits >> dropped) & 1);
    bits &= ~((uint64_t{1} << dropped) - 1);
    if (static_cast<int>((bits >> 52) & 0x7ff) - 1023 > format.max_exponent) return std::copysign(std::numeric_limits<double>::infinity(), x);
    return std::bit_cast<double>(bits);
  }
  int exponent = std::ilogb(x);  // |x| in [2^e, 2^(e+1))
  if (exponent < format.min_exponent) exponent = format.min_exponent;  // subnormal: fixed quantum
  const int quantum_exponent = exponent - (format.significand_bits - 1);
  const double scaled = std::ldexp(x, -quantum_exponent);  // exact: a power-of-two scaling
  const double rounded = std::ldexp(std::nearbyint(scaled), quantum_exponent);
  const double max_finite =
      std::ldexp(2.0 - std::ldexp(1.0, 1 - format.significand_bits), format.max_exponent);
  if (std::fabs(rounded) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return rounded;
}

}  // namespace orthojit
