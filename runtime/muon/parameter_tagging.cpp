// Tagging and matrix views (see parameter_tagging.h).
#include "runtime/muon/parameter_tagging.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace orthojit::runtime {

bool default_use_muon(const std::string& name, const std::vector<int64_t>& shape) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return shape.size() >= 2 && lower.find("embed") == std::string::npos && lower.find("lm_head") == std::string::npos;
}

namespace {
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}
}  // namespace

MatrixPlan plan_matrices(const Parameter& parameter, bool experts_as_batch) {
  const std::string where = "parameter '" + parameter.name + "' " + shape_text(parameter.shape);
  if (parameter.shape.size() < 2)
    throw std::invalid_argument(where + " is tagged for Muon but has " + std::to_string(parameter.shape.size()) +
                                " dimension(s); Muon orthogonalizes matrices (2 or more dimensions): tag it AdamW");
  for (int64_t extent : parameter.shape)
    if (extent <= 0) throw std::invalid_argument(where + " has an empty dimension");
  MatrixPlan plan;
  const bool batch = parameter.shape.size() >= 3 &&
                     (parameter.layout == MatrixLayout::Batch || (parameter.layout == MatrixLayout::Auto && experts_as_batch));
  if (batch) {
    plan.batch = parameter.shape[0];
    plan.rows = parameter.shape[1];
    plan.cols = 1;
    for (size_t d = 2; d < parameter.shape.size(); ++d) plan.cols *= parameter.shape[d];
  } else {
    plan.rows = parameter.shape[0];
    plan.cols = 1;
    for (size_t d = 1; d < parameter.shape.size(); ++d) plan.cols *= parameter.shape[d];
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
