// Round-to-nearest-even of a double to bf16, f16 or f32, computed exactly in double arithmetic.
// The reference interpreter uses it to emulate the storage type of each value, so its result is
// what a correct kernel with that storage type produces up to accumulation order.
#pragma once

#include <bit>
#include <cstdint>

#include "support/scalar_type.h"

namespace orthojit {

// Returns the value of `x` rounded to `type` (as a double). Handles subnormals, overflow to
// infinity (IEEE rule: |x| >= max + ulp/2) and passes NaN / infinity / zero through.
double round_to(ScalarType type, double x);

// round_to for a type known at compile time, for per-element loops (a Muon or Adam step stores
// every parameter through it): the target's normal binades below the largest inline, as round_to
// rounds them (the significand's low bits to nearest even; a carry moves to the next binade, which
// is still finite there), and every other value (zero, the target's subnormals, its largest binade
// where a carry overflows, infinities, NaN) through round_to itself. So the two agree bit for bit
// (tests/rounding_test.cpp checks it on every class of value).
template <ScalarType T>
inline double round_to_known(double x) {
  if constexpr (T == ScalarType::F64) {
    return x;
  } else {
    constexpr int significand_bits = T == ScalarType::BF16 ? 8 : T == ScalarType::F16 ? 11 : 24;
    constexpr int min_exponent = T == ScalarType::F16 ? -14 : -126;
    constexpr int max_exponent = T == ScalarType::F16 ? 15 : 127;
    constexpr int dropped = 53 - significand_bits;
    uint64_t bits = std::bit_cast<uint64_t>(x);
    const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    if (exponent < min_exponent || exponent >= max_exponent) return round_to(T, x);
    bits += (uint64_t{1} << (dropped - 1)) - 1 + ((bits >> dropped) & 1);
    return std::bit_cast<double>(bits & ~((uint64_t{1} << dropped) - 1));
  }
}

}  // namespace orthojit
