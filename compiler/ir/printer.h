// Text form of the IR, printed by `orthojit compile --emit ir` and after each pass with
// --dump-after (the lowering log, as in Halide).
#pragma once

#include <string>

#include "ir/function.h"

namespace orthojit::ir {

std::string print_function(const Function& function);
std::string format_polynomial(const std::vector<double>& coefficients, const std::string& variable);

}  // namespace orthojit::ir
