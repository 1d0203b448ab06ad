// The documented default when no tuning record exists: which strategy a shape gets under
// `--strategy auto`. The autotuner (a later layer of this folder) replaces it with measurements.
#pragma once

#include <cstdint>
#include <string>

#include "ir/function.h"

namespace orthojit::autotune {

struct StrategyChoice {
  ir::StrategyKind strategy = ir::StrategyKind::Standard;
  std::string reason;  // one line, printed by `orthojit run --verbose` and `compile`
};

// gram iff every step is odd-polynomial, the aspect ratio max/min is at least 2, and the small
// side is at least 128. Why: Gram NS does about 8·m²n + 28·m³ FLOPs against 20·m²n + 10·m³ for
// standard (5 steps, one restart), which breaks even near n = 1.5·m; below m = 128 the m x m
// products are too small to amortize the extra launches (docs/autotuning.md, "Without a record: the
// heuristic"; the FLOP counts: docs/architecture.md §5).
StrategyChoice choose_strategy_heuristically(const ir::Function& recognized, int64_t rows, int64_t cols);

}  // namespace orthojit::autotune
