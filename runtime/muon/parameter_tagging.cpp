// Tagging and matrix views (see parameter_tagging.h).
#include "runtime/muon/parameter_tagging.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace orthojit::runtime {

const char* to_string(TaggingRule rule) { return rule == TaggingRule::DeepSpeed ? "deepspeed" : "moonlight"; }

std::optional<TaggingRule> parse_tagging_rule(const std::string& text) {
  if (text == "deepspeed") return TaggingRule::DeepSpeed;
  if (text == "moonlight") return TaggingRule::Moonlight;
  return std::nullopt;
}

const char* to_string(ConvScale scale) { return scale == ConvScale::Kernel ? "kernel" : "matrix"; }

std::optional<ConvScale> parse_conv_scale(const std::string& text) {
  if (text == "kernel") return ConvScale::Kernel;
  if (text == "matrix") return ConvScale::Matrix;
  return std::nullopt;
}

bool default_use_muon(const std::string& name, const std::vector<int64_t>& shape, TaggingRule rule) {
  if (shape.size() < 2) return false;
  if (rule == TaggingRule::Moonlight) return name.find("embed_tokens") == std::string::npos && name.find("lm_head") == std::string::npos;
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("embed") == std::string::npos && lower.find("lm_head") == std::string::npos;
}

std::pair<int64_t, int64_t> scale_shape(const MatrixPlan& plan, const MatrixBlock& block) {
  if (plan.scale_rows > 0 && plan.scale_cols > 0) return {plan.scale_rows, plan.scale_cols};
  return {block.rows, plan.cols};
}


MatrixPlan plan_matrices(const Parameter& parameter, MatrixLayout layout, ConvScale conv_scale) {
  const std::string where = "parameter '" + parameter.name + "' " + shape_text(parameter.shape);
  if (parameter.shape.size() < 2)
    throw std::invalid_argument(where + " is tagged for Muon but has " + std::to_string(parameter.shape.size()) +
                                " dimension(s); Muon orthogonalizes matrices (2 or more dimensions): tag it AdamW");
  for (int64_t extent : parameter.shape)
    if (extent <= 0)
      throw std::invalid_argument(where + " has an empty dimension: Muon has no matrix to orthogonalize there; tag it for AdamW (use_muon false) "
                                          "or leave it out");
  MatrixPlan plan;
  const std::vector<int64_t>& shape = parameter.shape;
  const size_t ndim = shape.size();
  if (parameter.layout != MatrixLayout::Auto) layout = parameter.layout;
  if (layout == MatrixLayout::Auto) layout = MatrixLayout::Flatten;
  auto product = [&](size_t from, size_t to) {
    int64_t p = 1;
    for (size_t d = from; d < to; ++d) p *= shape[d];
    return p;
  };
  if (ndim >= 3 && layout == MatrixLayout::Batch) {
    plan.batch = shape[0];
    plan.rows = shape[1];
    plan.cols = product(2, ndim);
  } else if (ndim >= 3 && layout == MatrixLayout::Trailing && ndim != 4) {
    plan.batch = product(0, ndim - 2);
    plan.rows = shape[ndim - 2];
    plan.cols = shape[ndim - 1];
  } else {
    plan.rows = shape[0];
    plan.cols = product(1, ndim);
    if (ndim == 4 && layout == MatrixLayout::Trailing && conv_scale == ConvScale::Kernel) {
      plan.scale_rows = shape[2];
      plan.scale_cols = shape[3];
    }
  }
  std::vector<int64_t> splits = parameter.row_splits;
  if (splits.empty()) splits.push_back(plan.rows);
  int64_t total = 0;
  for (int64_t size : splits) {
    if (size <= 0) throw std::invalid_argument(where + ": row_splits must be positive");
    total += size;
  }
  if (total != plan.rows)
    throw std::invalid_argument(where + ": row_splits sum to " + std::to_string(total) + " but the matrix has " + std::to_string(plan.rows) + " rows");
  if (parameter.head_rows < 0) throw std::invalid_argument(where + ": head_rows must be positive (or 0: no per-head split)");
  int64_t offset = 0;
  for (int64_t size : splits) {
    if (parameter.head_rows > 0) {
      if (size % parameter.head_rows != 0)
        throw std::invalid_argument(where + ": a block of " + std::to_string(size) + " rows does not split into heads of " +
                                    std::to_string(parameter.head_rows) + " rows");
      for (int64_t head = 0; head < size / parameter.head_rows; ++head) plan.blocks.push_back({offset + head * parameter.head_rows, parameter.head_rows});
    } else {
      plan.blocks.push_back({offset, size});
    }
    offset += size;
  }
  return plan;
}

}  // namespace orthojit::runtime
