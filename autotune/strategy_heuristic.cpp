// Default strategy heuristic.
#include "autotune/strategy_heuristic.h"

#include <algorithm>

namespace orthojit::autotune {

StrategyChoice choose_strategy_heuristically(const ir::Function& recognized, int64_t rows, int64_t cols) {
  for (size_t k = 0; k < recognized.steps.size(); ++k)
    if (!recognized.steps[k].recognized)
      return {ir::StrategyKind::Standard, "standard: step " + std::to_string(k) + " is not of the form X <- p(X·Xᵀ)·X"};
  const int64_t small = std::min(rows, cols), large = std::max(rows, cols);
  if (small < 128) return {ir::StrategyKind::Standard, "standard: the small side " + std::to_string(small) + " is below 128"};
  if (large < 2 * small) return {ir::StrategyKind::Standard, "standard: aspect ratio below 2"};
  return {ir::StrategyKind::Gram, "gram: aspect ratio " + std::to_string(large / small) + " >= 2 and small side >= 128"};
}

}  // namespace orthojit::autotune
