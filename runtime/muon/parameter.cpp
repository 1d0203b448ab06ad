// Parameter helpers (see parameter.h).
#include "runtime/muon/parameter.h"

#include <algorithm>
#include <cctype>

namespace orthojit::runtime {

const char* to_string(DType type) {
  switch (type) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
  }
  return "?";
}

std::optional<DType> parse_dtype(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "f32" || lower == "float32" || lower == "float") return DType::F32;
  if (lower == "bf16" || lower == "bfloat16") return DType::BF16;
  if (lower == "f16" || lower == "float16" || lower == "half") return DType::F16;
  return std::nullopt;
}

const char* to_string(MatrixLayout layout) {
  switch (layout) {
    case MatrixLayout::Auto: return "auto";
    case MatrixLayout::Flatten: return "flatten";
    case MatrixLayout::Batch: return "batch";
    case MatrixLayout::Trailing: return "trailing";
  }
  return "?";
}

std::optional<MatrixLayout> parse_matrix_layout(const std::string& text) {
  if (text == "auto") return MatrixLayout::Auto;
  if (text == "flatten") return MatrixLayout::Flatten;
  if (text == "batch" || text == "experts") return MatrixLayout::Batch;
  if (text == "trailing") return MatrixLayout::Trailing;
  return std::nullopt;
}

int dtype_bytes(DType type) { return type == DType::F32 ? 4 : 2; }

int64_t Parameter::elements() const {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}

}  // namespace orthojit::runtime
