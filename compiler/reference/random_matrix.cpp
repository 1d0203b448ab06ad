// splitmix64 + Box–Muller.
#include "reference/random_matrix.h"

#include <cmath>

#include "support/bf16_bits.h"

namespace orthojit::reference {

std::vector<double> gaussian_values(int64_t count, uint64_t seed) {
  uint64_t state = seed;
  auto next_uniform = [&state] {  // splitmix64 -> a double in (0, 1)
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) * 0x1p-53;
  };
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(next_uniform()));
    const double angle = 2.0 * M_PI * next_uniform();
    values[static_cast<size_t>(i)] = radius * std::cos(angle);
    if (i + 1 < count) values[static_cast<size_t>(i + 1)] = radius * std::sin(angle);
  }
  return values;
}

std::vector<uint16_t> gaussian_bf16_bits(int64_t count, uint64_t seed) {
  const std::vector<double> values = gaussian_values(count, seed);
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = bf16_bits_of(static_cast<float>(values[i]));
  return bits;
}

}  // namespace orthojit::reference
