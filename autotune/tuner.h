// The CPU tuner: for one (program, shape, batch, precision) it enumerates the CPU search space
// (search_space.h) and prunes it, and supplies the shared tuning loop (tuning_loop.h: every
// candidate checked against the f64 reference, a fast wrong kernel recorded as wrong_result and
// never winning; the survivors timed within the budget, a large shape's by proxy; the finalists
// re-timed on the full iteration; ties within 2% to the earlier candidate) with how a CPU
// candidate is compiled (passes, then cpu::CpuExecutable), run and timed (timing_harness.h). The
// result is one tuning-record entry (tuning_record.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "autotune/search_space.h"
#include "autotune/tuning_loop.h"
#include "cpu/cpu_executable.h"
#include "dsl/ast.h"
#include "support/scalar_type.h"

namespace orthojit::autotune {

nlohmann::json tune_shape(const TuneProblem& problem, const TuneSettings& settings);

// A candidate compiled for a problem (its strategy, triangular products, blocking and engine),
// ready to run: what the tuner times, for `orthojit bench --model` to time side by side.
// Throws CompileError / std::invalid_argument when the candidate cannot be built.
std::unique_ptr<cpu::CpuExecutable> build_candidate(const TuneProblem& problem, const Candidate& candidate, int threads);

// The heuristic default configuration (what an untuned run uses) for this problem.
Candidate default_candidate(const dsl::Program& program, int64_t rows, int64_t cols, std::optional<ScalarType> precision, std::string* reason);

}  // namespace orthojit::autotune
