// Element type names and facts.
#include "support/scalar_type.h"

namespace orthojit {

std::string_view to_string(ScalarType type) {
  switch (type) {
    case ScalarType::BF16: return "bf16";
    case ScalarType::F16: return "f16";
    case ScalarType::F32: return "f32";
    case ScalarType::F64: return "f64";
  }
  return "?";
}

std::optional<ScalarType> parse_scalar_type(std::string_view text) {
  if (text == "bf16") return ScalarType::BF16;
  if (text == "f16") return ScalarType::F16;
  if (text == "f32") return ScalarType::F32;
  if (text == "f64") return ScalarType::F64;
  return std::nullopt;
}

int size_in_bytes(ScalarType type) {
  switch (type) {
    case ScalarType::BF16:
    case ScalarType::F16: return 2;
    case ScalarType::F32: return 4;
    case ScalarType::F64: return 8;
  }
  return 0;
}

double unit_roundoff(ScalarType type) {
  switch (type) {
    case ScalarType::BF16: return 0x1p-8;
    case ScalarType::F16: return 0x1p-11;
    case ScalarType::F32: return 0x1p-24;
    case ScalarType::F64: return 0x1p-53;
  }
  return 0;
}

}  // namespace orthojit
