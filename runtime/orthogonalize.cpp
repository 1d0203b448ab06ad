// Strategy resolution and backend dispatch.
#include "runtime/orthogonalize.h"

#include "autotune/strategy_heuristic.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"

namespace orthojit::runtime {

std::vector<std::string> available_backends() { return {"ref"}; }

std::optional<ir::StrategyKind> parse_strategy_option(const std::string& text) {
  if (text == "auto") return std::nullopt;
  if (auto kind = ir::parse_strategy(text)) return kind;
  throw UsageError("unknown strategy '" + text + "'; expected auto, standard or gram");
}

OrthogonalizeResult orthogonalize(const dsl::Program& program, const std::vector<double>& input, int64_t batch, int64_t rows,
                                  int64_t cols, const OrthogonalizeOptions& options) {
  if (options.backend != "ref") {
    std::string names;
    for (const auto& name : available_backends()) names += (names.empty() ? "" : ", ") + name;
    throw UsageError("backend '" + options.backend + "' is not available in this build; available: " + names);
  }
  passes::CompileOptions compile;
  compile.rows = rows;
  compile.cols = cols;
  compile.batch = batch;
  compile.precision = options.precision;
  compile.gram_restarts = options.gram_restarts;
  OrthogonalizeResult result;
  if (auto explicit_strategy = parse_strategy_option(options.strategy)) {
    result.strategy = *explicit_strategy;
    result.strategy_reason = std::string(ir::to_string(result.strategy)) + ": requested";
  } else {
    // Recognition on the standard form decides whether gram is possible at all.
    passes::CompileOptions probe = compile;
    probe.strategy = ir::StrategyKind::Standard;
    const ir::Function standard = passes::compile_program(program, probe);
    auto choice = autotune::choose_strategy_heuristically(standard, rows, cols);
    result.strategy = choice.strategy;
    result.strategy_reason = choice.reason + " (no tuning record; heuristic)";
  }
  compile.strategy = result.strategy;
  const ir::Function function = passes::compile_program(program, compile);
  result.values = reference::interpret(function, input);
  return result;
}

}  // namespace orthojit::runtime
