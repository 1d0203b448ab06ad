// The Frobenius norm of a normalize, robust at the ends of the floating-point range. Every
// backend (the interpreter, the CPU executable, and the CUDA kernels) sums the squares of
// x·s, s = 2^-e a power of two with the largest |x| = f·2^e, f in [0.5, 1), and divides x·s by
// the scaled denominator ‖x·s‖·safety + eps·s:
//
//   * where the unscaled sums neither overflow nor underflow, every step is the unscaled one
//     times a power of two (IEEE rounding is invariant under it), so the bits are the same as
//     without the scale: x/(‖x‖·safety + eps) = (x·s)/(‖x·s‖·safety + eps·s) exactly;
//   * a 64 x 256 f32 matrix of 1e18 (Σx² ≈ 1.6e40 overflows f32, and X/∞ = 0 came back) or of
//     1e-30 (Σx² underflows to 0) now normalizes to what the exact arithmetic gives.
//
// The exponent is kept in [-126, 126] so that s and eps·s stay finite normal f32 values; a zero,
// NaN or infinite maximum leaves s = 1 (zeros stay zeros; non-finite values propagate, and the
// runtime refuses non-finite input before it gets here).
#pragma once

#include <cmath>

namespace orthojit::ir {

// `max_exponent`: 126 where the scale and the values live in f32 (every backend's f32 and 16-bit
// storage); the interpreter's f64 programs pass 1022.
inline double norm_scale(double largest_magnitude, int max_exponent = 126) {
  if (!(largest_magnitude > 0) || !std::isfinite(largest_magnitude)) return 1.0;
  int exponent = 0;
  std::frexp(largest_magnitude, &exponent);
  exponent = exponent < -max_exponent ? -max_exponent : exponent > max_exponent ? max_exponent : exponent;
  return std::ldexp(1.0, -exponent);
}

}  // namespace orthojit::ir
