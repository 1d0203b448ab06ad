// The options the CLI and the bindings share (runtime/shared_options.h).
#include "runtime/shared_options.h"

#include <cctype>
#include <sstream>
#include <vector>

namespace orthojit::runtime {

ParsedShape parse_shape(const std::string& text) {
  std::vector<int64_t> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, 'x')) {
    bool digits = !part.empty() && part.size() <= 9;
    for (char c : part) digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (!digits || std::stoll(part) < 1)
      throw UsageError("invalid shape '" + text + "'; expected MxN or MxNxB with positive integers, e.g. 1024x4096 or 128x512x8");
    parts.push_back(std::stoll(part));
  }
  if (parts.size() != 2 && parts.size() != 3)
    throw UsageError("invalid shape '" + text + "'; expected MxN or MxNxB with positive integers, e.g. 1024x4096 or 128x512x8");
  return {parts[0], parts[1], parts.size() == 3 ? parts[2] : 1};
}

std::optional<ScalarType> parse_tuning_precision(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  const std::optional<ScalarType> precision = parse_scalar_type(*text);
  if (!precision || *precision == ScalarType::F64) throw UsageError("unknown precision '" + *text + "'; expected bf16, f16 or f32");
  return precision;
}

OrthogonalizationMode parse_plan_mode(const std::string& mode) {
  if (mode == "deepspeed") return OrthogonalizationMode::DeepSpeed;
  if (mode == "balanced") return OrthogonalizationMode::Balanced;
  throw UsageError("unknown --mode '" + mode + "'; expected deepspeed or balanced");
}

}  // namespace orthojit::runtime
