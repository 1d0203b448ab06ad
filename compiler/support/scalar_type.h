// Element types of the precision policy (bf16, f16, f32, f64) and their facts.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace orthojit {

enum class ScalarType { BF16, F16, F32, F64 };

// The DSL / CLI spelling: "bf16", "f16", "f32", "f64".
std::string_view to_string(ScalarType type);
std::optional<ScalarType> parse_scalar_type(std::string_view text);

// Bytes of one stored element.
int size_in_bytes(ScalarType type);

// True for the 16-bit types, the ones a cast may overflow (f16) or lose much precision.
inline bool is_16bit(ScalarType type) { return type == ScalarType::BF16 || type == ScalarType::F16; }

// Unit roundoff 2^-p (p = significand bits incl. the implicit one): the relative error of one rounding.
double unit_roundoff(ScalarType type);

}  // namespace orthojit
