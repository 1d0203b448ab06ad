// The tuner: for one (program, shape, batch, precision) it enumerates the search space, prunes,
// compiles, checks every candidate's output against the f64 reference (reference_check.h: every
// 16x16 tile of every matrix of the batch, or of a sample of a large batch; a fast wrong kernel
// is recorded as wrong_result and never wins), times the survivors within the budget, re-times
// the top three and picks the winner (ties within 2% go to the earlier candidate in the search
// space's order). The result is one tuning-record entry (tuning_record.h).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "autotune/error_measure.h"
#include "autotune/search_space.h"
#include "autotune/timing_harness.h"
#include "cpu/cpu_executable.h"
#include "dsl/ast.h"
#include "support/scalar_type.h"

namespace orthojit::autotune {

struct TuneProblem {
  const dsl::Program* program = nullptr;
  std::string program_name;  // for the record
  int64_t rows = 0, cols = 0, batch = 1;
  std::optional<ScalarType> precision;  // overrides the program's storage type
};

struct TuneProgress {
  int candidate = 0, candidates = 0;  // 1-based index of the candidate being worked on
  std::string label, phase;           // phase: "check", "time", "retime"
};

struct TuneSettings {
  double budget_seconds = 20;  // for this shape, all candidates together (the default candidate is always timed)
  int threads = 0;             // 0: all cores
  std::function<void(const TuneProgress&)> progress;
  // Test hook: called with every candidate's output before the check (to simulate a wrong kernel).
  std::function<void(const Candidate&, float* output, size_t count)> tamper_output;
};

// The key fields of a problem: its program hash (SHA-256 of the lowered IR text, 16 hex digits),
// storage and accumulate types.
struct ProblemKey {
  std::string program_hash, storage, accumulate, key;
};
ProblemKey problem_key(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, std::optional<ScalarType> precision);

// The bounds a record's candidates were checked against (autotune/error_measure.h: the largest
// error per 16x16 tile relative to the tile's reference RMS, and the per-matrix relative
// Frobenius error), as the record's bench.tolerance.
nlohmann::json tolerance_json(const ErrorBounds& bounds);

// Which candidate wins: the fastest p50 among those with status "ok", except that any candidate
// within `tie_tolerance` of the fastest and earlier in `order` wins instead. Returns the index into
// `p50_ms`, or nullopt when none is ok.
std::optional<size_t> pick_winner(const std::vector<double>& p50_ms, const std::vector<bool>& ok, double tie_tolerance);

nlohmann::json tune_shape(const TuneProblem& problem, const TuneSettings& settings);

// One candidate's outcome as a tuner (CPU or CUDA) saw it.
struct TrialOutcome {
  std::string label;
  nlohmann::json config;
  std::string status, message;  // status "ok", "pruned", "wrong_result", ...
  Timing timing;                // when ok
  double error = -1;            // against the reference, when checked
  bool is_default = false;      // the untuned configuration
  bool is_vendor = false;       // a vendor library (OpenBLAS, oneDNN, cuBLAS)
  std::optional<int> stage;
};

// The tuning-record entry of one problem (the layout of tuning_record.h): every candidate, the
// default's and the vendor's medians, and the winner (pick_winner over the ok trials, in order).
nlohmann::json make_tuning_entry(const TuneProblem& problem, const ProblemKey& key, nlohmann::json bench, const std::vector<TrialOutcome>& trials,
                                 double tie_tolerance, const std::string& default_label, const std::string& default_reason);

// A candidate compiled for a problem (its strategy, triangular products, blocking and engine),
// ready to run: what the tuner times, for `orthojit bench --model` to time side by side.
// Throws CompileError / std::invalid_argument when the candidate cannot be built.
std::unique_ptr<cpu::CpuExecutable> build_candidate(const TuneProblem& problem, const Candidate& candidate, int threads);

// The heuristic default configuration (what an untuned run uses) for this problem.
Candidate default_candidate(const dsl::Program& program, int64_t rows, int64_t cols, std::optional<ScalarType> precision, std::string* reason);

}  // namespace orthojit::autotune
