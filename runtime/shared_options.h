// The option values the CLI and the Python bindings both take, parsed once: a shape written
// "MxN" or "MxNxB", a tuning precision, a ZeRO orthogonalization mode. Each throws UsageError
// naming what was given and what is valid. (The CLI's own argv parsing is cli/arguments.h.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/orthogonalize.h"
#include "runtime/zero/partition_plan.h"
#include "support/scalar_type.h"

namespace orthojit::runtime {

struct ParsedShape {
  int64_t rows = 0, cols = 0, batch = 1;
};
// "MxN" or "MxNxB" (batch last, as in `orthojit bench --shape`). Throws UsageError.
ParsedShape parse_shape(const std::string& text);

// The precision for tuning and comparing: bf16, f16 or f32 (f64 is the reference's); nullopt when
// absent (the program's own). Throws UsageError.
std::optional<ScalarType> parse_tuning_precision(const std::optional<std::string>& text);

// "deepspeed" | "balanced"; throws UsageError naming the valid values.
OrthogonalizationMode parse_plan_mode(const std::string& mode);

}  // namespace orthojit::runtime
