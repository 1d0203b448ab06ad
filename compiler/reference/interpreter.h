// The float64 reference interpreter: evaluates scheduled IR with each stored value rounded to its
// declared type (round-to-nearest-even to bf16, f16, f32). Sums are exact-order f64, so its bf16
// result is what a correct bf16 kernel produces up to accumulation-order error. Every backend is
// tested against it.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/function.h"

namespace orthojit::reference {

// `input` holds `function.batch` matrices of the user's shape (function.input_shape), row-major,
// one after the other. Returns the outputs in the same layout. Uses the buffer plan when the
// function has one (so a planning bug shows up as a wrong result), otherwise one slot per value.
// Throws std::invalid_argument when `input` has the wrong size, std::logic_error on unspecialized IR.
std::vector<double> interpret(const ir::Function& function, const std::vector<double>& input);

}  // namespace orthojit::reference
