// The one call that turns a program and a batch of matrices into their orthogonalized versions:
// compile (passes), pick the strategy (explicit, or the autotune layer's choice under "auto"),
// run on a backend. The reference backend exists today; the CPU (LLVM) and CUDA backends plug in
// here as they arrive.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "ir/function.h"

namespace orthojit::runtime {

// Bad input from the user (wrong option value, unavailable backend): the CLI exits 2 on it.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OrthogonalizeOptions {
  std::string strategy = "auto";  // auto | standard | gram
  std::optional<std::vector<int>> gram_restarts;
  std::optional<ScalarType> precision;
  std::string backend = "ref";
};

struct OrthogonalizeResult {
  std::vector<double> values;  // batch x rows x cols, row-major
  ir::StrategyKind strategy = ir::StrategyKind::Standard;
  std::string strategy_reason;
};

// Names of the backends this build can run, in preference order.
std::vector<std::string> available_backends();

// `input` holds `batch` row-major rows x cols matrices.
OrthogonalizeResult orthogonalize(const dsl::Program& program, const std::vector<double>& input, int64_t batch, int64_t rows,
                                  int64_t cols, const OrthogonalizeOptions& options);

// Parses "auto" / "standard" / "gram"; throws UsageError naming the valid values.
std::optional<ir::StrategyKind> parse_strategy_option(const std::string& text);

}  // namespace orthojit::runtime
