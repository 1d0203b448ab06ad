// Round-to-nearest-even of a double to bf16, f16 or f32, computed exactly in double arithmetic.
// The reference interpreter uses it to emulate the storage type of each value, so its result is
// what a correct kernel with that storage type produces up to accumulation order.
#pragma once

#include "support/scalar_type.h"

namespace orthojit {

// Returns the value of `x` rounded to `type` (as a double). Handles subnormals, overflow to
// infinity (IEEE rule: |x| >= max + ulp/2) and passes NaN / infinity / zero through.
double round_to(ScalarType type, double x);

}  // namespace orthojit
