// The tuner's options and outcomes as types: the backend a shape is tuned on, a candidate's
// status, and the CPU product engine's names. Each is parsed from text once, where text enters
// (the CLI's arguments, the Python bindings, a record file's JSON), and written back with the same
// strings, so record files of earlier versions read the same.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cpu/vendor_gemm.h"
#include "ir/function.h"

namespace orthojit::autotune {

enum class TuneBackend { Cpu, Cuda };
const char* to_string(TuneBackend backend);                           // "cpu", "cuda"
std::optional<TuneBackend> parse_tune_backend(std::string_view text);  // nullopt for anything else

// What became of a candidate (the record's "status").
enum class TrialStatus {
  Pending,        // not judged yet (never written)
  Ok,             // checked against the reference and timed
  Pruned,         // not built: impossible or redundant here (the message says why)
  WrongResult,    // its output failed the reference check (or was not finite)
  CompileFailed,  // it could not be built
  RunFailed,      // running it threw
  SkippedBudget,  // the shape's budget was spent before its turn
};
const char* to_string(TrialStatus status);  // "ok", "pruned", "wrong_result", "compile_failed", "run_failed", "skipped_budget"
std::optional<TrialStatus> parse_trial_status(std::string_view text);

// The CPU product engines by their record names ("jit", "openblas", "onednn": cpu::to_string).
std::optional<cpu::ProductEngine> parse_product_engine(std::string_view text);

// ir::parse_strategy for a record's or an option's text, throwing std::invalid_argument naming
// `what` and the valid values.
ir::StrategyKind parse_strategy_or_throw(const std::string& text, const std::string& what);

}  // namespace orthojit::autotune
