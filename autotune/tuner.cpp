// The tuner (see tuner.h).
#include "autotune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "autotune/reference_check.h"
#include "autotune/strategy_heuristic.h"
#include "autotune/timing_harness.h"
#include "autotune/tuning_record.h"
#include "cpu/cpu_executable.h"
#include "cpu/openblas_library.h"
#include "cpu/vendor_gemm.h"
#include "ir/lower_program.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"
#include "reference/random_matrix.h"
#include "support/sha256.h"

namespace orthojit::autotune {
namespace {

using Clock = std::chrono::steady_clock;

ir::Function compile_for(const TuneProblem& problem, const Candidate& candidate, int64_t rows, int64_t cols, int64_t batch) {
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  options.precision = problem.precision;
  options.strategy = candidate.strategy == "gram" ? ir::StrategyKind::Gram : ir::StrategyKind::Standard;
  options.triangular_products = candidate.triangular;
  return passes::compile_program(*problem.program, options);
}

cpu::CpuOptions cpu_options_for(const Candidate& candidate, int threads) {
  cpu::CpuOptions options;
  options.threads = threads;
  options.blocking = candidate.blocking();
  options.engine = candidate.engine == "openblas" ? cpu::ProductEngine::OpenBlas
                   : candidate.engine == "onednn" ? cpu::ProductEngine::OneDnn
                                                  : cpu::ProductEngine::Jit;
  if (auto isa = candidate.cpu_isa()) options.isa = *isa;
  return options;
}

}  // namespace

nlohmann::json tolerance_json(const ErrorBounds& bounds) {
  return {{"tile", bounds.tile}, {"frobenius", bounds.frobenius}, {"measure", "max |c-r| per 16x16 tile / the tile's reference RMS; per-matrix relative Frobenius"}};
}

std::unique_ptr<cpu::CpuExecutable> build_candidate(const TuneProblem& problem, const Candidate& candidate, int threads) {
  return std::make_unique<cpu::CpuExecutable>(compile_for(problem, candidate, problem.rows, problem.cols, problem.batch), cpu_options_for(candidate, threads));
}

ProblemKey problem_key(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, std::optional<ScalarType> precision) {
  ProblemKey key;
  key.program_hash = sha256_hex(ir::print_function(ir::lower_program(program))).substr(0, 16);
  const dsl::PrecisionPolicy policy = passes::effective_policy(program.policy, precision);
  key.storage = to_string(policy.storage);
  key.accumulate = to_string(policy.accumulate);
  // Oriented (rows <= cols): a shape and its transpose run the same kernels.
  key.key = entry_key(key.program_hash, std::min(rows, cols), std::max(rows, cols), batch, key.storage, key.accumulate);
  return key;
}

std::optional<size_t> pick_winner(const std::vector<double>& p50_ms, const std::vector<bool>& ok, double tie_tolerance) {
  std::optional<size_t> fastest;
  for (size_t i = 0; i < p50_ms.size(); ++i)
    if (ok[i] && (!fastest || p50_ms[i] < p50_ms[*fastest])) fastest = i;
  if (!fastest) return std::nullopt;
  for (size_t i = 0; i < p50_ms.size(); ++i)  // the earliest within the tie band
    if (ok[i] && p50_ms[i] <= p50_ms[*fastest] * (1 + tie_tolerance)) return i;
  return fastest;
}

Candidate default_candidate(const dsl::Program& program, int64_t rows, int64_t cols, std::optional<ScalarType> precision, std::string* reason) {
  passes::CompileOptions probe;
  probe.rows = rows;
  probe.cols = cols;
  probe.precision = precision;
  const ir::Function standard = passes::compile_program(program, probe);
  const StrategyChoice choice = choose_strategy_heuristically(standard, rows, cols);
  if (reason) *reason = choice.reason;
  Candidate candidate;
  candidate.strategy = ir::to_string(choice.strategy);
  // The default path's engine of the bf16 products, named (amx where usable): the untuned default
  // is one of the searched candidates.
  candidate.kernel = default_kernel(standard.policy.storage);
  return candidate;
}

nlohmann::json tune_shape(const TuneProblem& problem, const TuneSettings& settings) {
  const auto started = Clock::now();
  const SearchSpace& space = search_space("cpu");
  const ProblemKey key = problem_key(*problem.program, problem.rows, problem.cols, problem.batch, problem.precision);
  std::string default_reason;
  const Candidate fallback = default_candidate(*problem.program, problem.rows, problem.cols, problem.precision, &default_reason);

  const ScalarType storage = passes::effective_policy(problem.program->policy, problem.precision).storage;
  // Can gram be compiled at all (every step an odd polynomial)?
  std::string gram_error;
  try {
    Candidate gram;
    gram.strategy = "gram";
    compile_for(problem, gram, problem.rows, problem.cols, 1);
  } catch (const std::exception& error) {
    gram_error = error.what();
  }

  const auto values = reference::gaussian_values(problem.rows * problem.cols * problem.batch, 20261201);
  const std::vector<float> input(values.begin(), values.end());
  std::vector<float> output(input.size());

  struct Trial {
    Candidate candidate;
    std::string status = "pending", message;
    Timing timing;
    double error = -1;
    bool is_default = false;
  };
  std::vector<Trial> trials;
  std::vector<Candidate> accepted;
  // The f64 references by strategy: of the full shape, or of the reduced one (same input for every
  // candidate of a strategy, so computed once).
  std::map<std::string, Reference> references, reduced_references;
  std::optional<ErrorBounds> bounds;  // those the candidates were checked against, for the record

  auto add_candidates = [&](const std::vector<Candidate>& candidates) {
    for (const Candidate& candidate : candidates) {
      Trial trial;
      trial.candidate = candidate;
      trial.is_default = candidate == fallback;
      if (auto reason = prune_reason(candidate, problem.rows, problem.cols, gram_error, accepted, storage)) {
        trial.status = "pruned";
        trial.message = *reason;
      } else {
        accepted.push_back(candidate);
      }
      trials.push_back(trial);
    }
  };
  std::vector<Candidate> first = stage_one_candidates(space);
  // The untuned default goes first (it is always timed, and it wins ties), then the other
  // triangular jit strategy, the vendor library, and the dense variants: when the budget runs out
  // on a large shape, what was skipped is what mattered least.
  auto priority = [&](const Candidate& candidate) {
    if (candidate == fallback) return 0;
    if (candidate.engine == "jit" && candidate.triangular) return 1;
    if ((candidate.engine == "openblas" || candidate.engine == "onednn") && candidate.triangular) return 2;
    return 3;
  };
  std::stable_sort(first.begin(), first.end(), [&](const Candidate& a, const Candidate& b) { return priority(a) < priority(b); });
  add_candidates(first);

  const double budget_ms = settings.budget_seconds * 1000;
  auto elapsed_ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - started).count(); };
  auto report = [&](size_t index, const char* phase) {
    if (!settings.progress) return;
    TuneProgress progress;
    progress.candidate = static_cast<int>(index + 1);
    progress.candidates = static_cast<int>(trials.size());
    progress.label = trials[index].candidate.label();
    progress.phase = phase;
    settings.progress(progress);
  };

  auto evaluate = [&](size_t index) {
    Trial& trial = trials[index];
    if (trial.status != "pending") return;
    const bool must_run = trial.is_default;
    if (!must_run && elapsed_ms() > budget_ms) {
      trial.status = "skipped_budget";
      trial.message = "the shape's tuning budget was spent";
      return;
    }
    report(index, "check");
    std::unique_ptr<cpu::CpuExecutable> executable;
    ir::Function function;
    try {
      function = compile_for(problem, trial.candidate, problem.rows, problem.cols, problem.batch);
      executable = std::make_unique<cpu::CpuExecutable>(function, cpu_options_for(trial.candidate, settings.threads));
    } catch (const std::exception& error) {
      trial.status = "compile_failed";
      trial.message = error.what();
      return;
    }
    try {
      std::fill(output.begin(), output.end(), std::numeric_limits<float>::quiet_NaN());
      const auto check_started = Clock::now();
      executable->run(input.data(), output.data());
      const double check_run_ms = std::chrono::duration<double, std::milli>(Clock::now() - check_started).count();
      if (settings.tamper_output) settings.tamper_output(trial.candidate, output.data(), output.size());
      for (float value : output)
        if (!std::isfinite(value)) {
          trial.status = "wrong_result";
          trial.message = "non-finite or unwritten output";
          return;
        }
      CheckResult check;
      if (iteration_flops(function) <= kFullCheckFlops) {
        auto cached = references.find(trial.candidate.strategy);
        if (cached == references.end()) cached = references.emplace(trial.candidate.strategy, reference_of(function, input)).first;
        check = compare(output, cached->second);
        if (!bounds) bounds = cached->second.bounds;
      } else {
        // The same configuration, batch included (the batch's split over threads is part of it),
        // on a reduced shape of the same aspect class; checked like a full one.
        int64_t small_rows = 0, small_cols = 0;
        reduced_check_shape(problem.rows, problem.cols, small_rows, small_cols);
        const ir::Function reduced = compile_for(problem, trial.candidate, small_rows, small_cols, problem.batch);
        cpu::CpuExecutable reduced_executable(reduced, cpu_options_for(trial.candidate, settings.threads));
        const auto reduced_values = reference::gaussian_values(small_rows * small_cols * problem.batch, 7);
        const std::vector<float> reduced_input(reduced_values.begin(), reduced_values.end());
        std::vector<float> reduced_output(reduced_input.size(), std::numeric_limits<float>::quiet_NaN());
        reduced_executable.run(reduced_input.data(), reduced_output.data());
        if (settings.tamper_output) settings.tamper_output(trial.candidate, reduced_output.data(), reduced_output.size());
        auto cached = reduced_references.find(trial.candidate.strategy);
        if (cached == reduced_references.end()) cached = reduced_references.emplace(trial.candidate.strategy, reference_of(reduced, reduced_input)).first;
        check = compare(reduced_output, cached->second);
        if (!bounds) bounds = cached->second.bounds;
        if (!check.ok) check.message += " (on the reduced shape " + std::to_string(small_rows) + "x" + std::to_string(small_cols) + ")";
      }
      trial.error = check.error;
      if (!check.ok) {
        trial.status = "wrong_result";
        trial.message = check.message;
        return;
      }
      report(index, "time");
      const int remaining = std::max<int>(1, static_cast<int>(std::count_if(trials.begin(), trials.end(), [](const Trial& t) { return t.status == "pending"; })));
      TimingSettings timing;
      timing.budget_seconds = std::max(0.05, (budget_ms - elapsed_ms()) / 1000.0 / (remaining + 1));
      timing.initial_run_ms = check_run_ms;
      trial.timing = time_repeated([&] { executable->run(input.data(), output.data()); }, timing);
      trial.status = "ok";
    } catch (const std::exception& error) {
      trial.status = "run_failed";
      trial.message = error.what();
    }
  };

  for (size_t index = 0; index < trials.size(); ++index) evaluate(index);
  // Stage 2: the other blockings of the fastest correct jit configuration.
  std::optional<size_t> best_jit;
  for (size_t i = 0; i < trials.size(); ++i)
    if (trials[i].status == "ok" && trials[i].candidate.engine == "jit" && (!best_jit || trials[i].timing.p50_ms < trials[*best_jit].timing.p50_ms)) best_jit = i;
  if (best_jit) {
    const size_t before = trials.size();
    add_candidates(stage_two_candidates(space, trials[*best_jit].candidate));
    for (size_t index = before; index < trials.size(); ++index) evaluate(index);
  }
  // Re-time the top few (noise on a shared machine), then pick.
  std::vector<size_t> ranked;
  for (size_t i = 0; i < trials.size(); ++i)
    if (trials[i].status == "ok") ranked.push_back(i);
  std::sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return trials[a].timing.p50_ms < trials[b].timing.p50_ms; });
  if (ranked.size() > 1) {
    for (size_t r = 0; r < std::min<size_t>(ranked.size(), static_cast<size_t>(space.retime_top)); ++r) {
      Trial& trial = trials[ranked[r]];
      const double remaining_ms = budget_ms - elapsed_ms();
      if (remaining_ms < trial.timing.p50_ms * 2) break;  // keep the first timing
      report(ranked[r], "retime");
      const ir::Function function = compile_for(problem, trial.candidate, problem.rows, problem.cols, problem.batch);
      const cpu::CpuExecutable executable(function, cpu_options_for(trial.candidate, settings.threads));
      TimingSettings timing;
      timing.budget_seconds = std::max(0.05, remaining_ms / 1000.0 / static_cast<double>(space.retime_top));
      const Timing again = time_repeated([&] { executable.run(input.data(), output.data()); }, timing);
      trial.timing.samples_ms.insert(trial.timing.samples_ms.end(), again.samples_ms.begin(), again.samples_ms.end());
      summarize(trial.timing);
    }
  }
  nlohmann::json bench = {{"budget_s", settings.budget_seconds},
                          {"threads", settings.threads},
                          {"flush_bytes", cache_flush_bytes()},
                          {"warmup", "one run (kept as a sample when longer than 1 s)"},
                          {"blas", std::string("OpenBLAS ") + cpu::openblas_kernel_name()},
                          {"blas_coretype", cpu::openblas_coretype_origin()},
                          {"onednn", cpu::onednn_description()},
                          {"elapsed_s", elapsed_ms() / 1000}};
  if (bounds) bench["tolerance"] = tolerance_json(*bounds);
  std::vector<TrialOutcome> outcomes;
  for (const Trial& trial : trials)
    outcomes.push_back({trial.candidate.label(), trial.candidate.to_json(), trial.status, trial.message, trial.timing, trial.error, trial.is_default,
                        trial.candidate.engine == "openblas" || trial.candidate.engine == "onednn", trial.candidate.stage});
  return make_tuning_entry(problem, key, std::move(bench), outcomes, space.tie_tolerance, fallback.label(), default_reason);
}

nlohmann::json make_tuning_entry(const TuneProblem& problem, const ProblemKey& key, nlohmann::json bench, const std::vector<TrialOutcome>& trials,
                                 double tie_tolerance, const std::string& default_label, const std::string& default_reason) {
  std::vector<double> p50;
  std::vector<bool> ok;
  for (const TrialOutcome& trial : trials) {
    p50.push_back(trial.timing.p50_ms);
    ok.push_back(trial.status == "ok");
  }
  const std::optional<size_t> winner = pick_winner(p50, ok, tie_tolerance);
  nlohmann::json entry;
  entry["program"] = problem.program_name;
  entry["program_hash"] = key.program_hash;
  entry["rows"] = problem.rows;
  entry["cols"] = problem.cols;
  entry["batch"] = problem.batch;
  entry["storage"] = key.storage;
  entry["accumulate"] = key.accumulate;
  entry["timestamp"] = utc_timestamp();
  entry["bench"] = std::move(bench);
  nlohmann::json candidates = nlohmann::json::array();
  std::optional<double> default_ms, vendor_ms;
  std::string vendor_label;
  for (const TrialOutcome& trial : trials) {
    nlohmann::json item = {{"label", trial.label}, {"config", trial.config}, {"status", trial.status}};
    if (trial.stage) item["stage"] = *trial.stage;
    if (!trial.message.empty()) item["message"] = trial.message;
    if (trial.error >= 0) item["error"] = trial.error;
    if (trial.status == "ok") {
      item["p20_ms"] = trial.timing.p20_ms;
      item["p50_ms"] = trial.timing.p50_ms;
      item["p80_ms"] = trial.timing.p80_ms;
      item["repeats"] = trial.timing.repeats();
      if (trial.is_default) default_ms = trial.timing.p50_ms;
      if (trial.is_vendor && (!vendor_ms || trial.timing.p50_ms < *vendor_ms)) {
        vendor_ms = trial.timing.p50_ms;  // the fastest vendor library: the library at its best
        vendor_label = trial.label;
      }
    }
    candidates.push_back(item);
  }
  entry["candidates"] = candidates;
  entry["default"] = {{"label", default_label}, {"reason", default_reason}};
  if (default_ms) entry["default"]["p50_ms"] = *default_ms;
  if (vendor_ms) {
    entry["vendor_p50_ms"] = *vendor_ms;
    entry["vendor_label"] = vendor_label;
  }
  if (winner) {
    const TrialOutcome& trial = trials[*winner];
    entry["winner"] = {{"label", trial.label}, {"config", trial.config}, {"p50_ms", trial.timing.p50_ms}};
  } else {
    entry["winner"] = nullptr;
  }
  entry["key"] = key.key;
  return entry;
}

}  // namespace orthojit::autotune
