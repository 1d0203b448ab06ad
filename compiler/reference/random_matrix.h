// Reproducible random inputs for tests, the demo and benchmarks: the same seed gives the same
// matrix on every platform (a fixed generator and Box–Muller, not std::normal_distribution,
// whose output the standard leaves to the implementation).
#pragma once

#include <cstdint>
#include <vector>

namespace orthojit::reference {

// `count` independent standard normal values.
std::vector<double> gaussian_values(int64_t count, uint64_t seed);

// The same values rounded to bf16 (to nearest even), as bits: operands for device buffers.
std::vector<uint16_t> gaussian_bf16_bits(int64_t count, uint64_t seed);

}  // namespace orthojit::reference
