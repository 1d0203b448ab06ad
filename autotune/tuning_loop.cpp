// The shared tuning loop (see tuning_loop.h).
#include "autotune/tuning_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "autotune/reference_check.h"
#include "autotune/tuning_record.h"
#include "ir/lower_program.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "reference/random_matrix.h"
#include "support/sha256.h"

namespace orthojit::autotune {
namespace {

using Clock = std::chrono::steady_clock;

bool all_finite(const std::vector<float>& values) {
  return std::all_of(values.begin(), values.end(), [](float value) { return std::isfinite(value); });
}

std::vector<float> gaussian_input(int64_t count, uint64_t seed) {
  const auto values = reference::gaussian_values(count, seed);
  return std::vector<float>(values.begin(), values.end());
}

// The proxy's samples as full-iteration estimates.
Timing scaled(const Timing& timing, double scale) {
  Timing result;
  for (double sample : timing.samples_ms) result.samples_ms.push_back(sample * scale);
  summarize(result);
  return result;
}

}  // namespace

std::vector<Trial> TuningBackend::more_candidates(const std::vector<Trial>&) { return {}; }

nlohmann::json tolerance_json(const ErrorBounds& bounds) {
  return {{"tile", bounds.tile}, {"frobenius", bounds.frobenius}, {"measure", "max |c-r| per 16x16 tile / the tile's reference RMS; per-matrix relative Frobenius"}};
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

std::optional<size_t> pick_winner(const std::vector<double>& p50_ms, const std::vector<bool>& eligible, double tie_tolerance) {
  std::optional<size_t> fastest;
  for (size_t i = 0; i < p50_ms.size(); ++i)
    if (eligible[i] && (!fastest || p50_ms[i] < p50_ms[*fastest])) fastest = i;
  if (!fastest) return std::nullopt;
  for (size_t i = 0; i < p50_ms.size(); ++i)  // the earliest within the tie band
    if (eligible[i] && p50_ms[i] <= p50_ms[*fastest] * (1 + tie_tolerance)) return i;
  return fastest;
}

double schedule_flops(const ir::Function& function) {
  double flops = 0;
  for (const auto& node : function.nodes)
    if (node.kind == ir::OpKind::Gemm)
      flops += 2.0 * static_cast<double>(node.shape.rows.size) * static_cast<double>(node.shape.cols.size) *
               static_cast<double>(function.node(node.operands[0]).shape.cols.size);
  return flops * static_cast<double>(function.batch);
}

ProxyShape proxy_shape(int64_t rows, int64_t cols, int64_t batch, double max_step_flops) {
  auto step_flops = [](int64_t r, int64_t c, int64_t b) {
    const double m = static_cast<double>(std::min(r, c)), n = static_cast<double>(std::max(r, c));
    return (4 * m * m * n + 2 * m * m * m) * static_cast<double>(b);
  };
  ProxyShape shape{rows, cols, batch};
  if (!(max_step_flops > 0) || step_flops(rows, cols, batch) <= max_step_flops) return shape;
  // Fewer matrices first (each costs the same): down to the smallest batch that still fills the
  // batch's split, kProxyMinBatch.
  if (batch > kProxyMinBatch) {
    const double per_matrix = step_flops(rows, cols, 1);
    shape.batch = std::clamp<int64_t>(static_cast<int64_t>(max_step_flops / per_matrix), kProxyMinBatch, batch);
  }
  const double cost = step_flops(rows, cols, shape.batch);
  if (cost <= max_step_flops) return shape;
  // Then both sides by the same factor (the cost is cubic in it), keeping the aspect ratio, in
  // whole 32-row/column microtiles and no smaller than kProxyMinSide.
  const double factor = std::cbrt(max_step_flops / cost);
  auto side = [&](int64_t extent) {
    const int64_t scaled = static_cast<int64_t>(std::llround(static_cast<double>(extent) * factor / 32.0)) * 32;
    return std::min(extent, std::max<int64_t>(scaled, kProxyMinSide));
  };
  shape.rows = side(rows);
  shape.cols = side(cols);
  return shape;
}

dsl::Program first_steps(const dsl::Program& program, int steps) {
  dsl::Program reduced = program;
  if (steps > 0 && static_cast<size_t>(steps) < reduced.steps.size()) reduced.steps.resize(static_cast<size_t>(steps));
  // A restart happens before the step with its index: only those inside the reduced steps remain.
  reduced.gram_restarts.clear();
  for (int restart : program.gram_restarts)
    if (restart >= 1 && restart < static_cast<int>(reduced.steps.size())) reduced.gram_restarts.push_back(restart);
  return reduced;
}

ir::Function compile_candidate(const dsl::Program& program, std::optional<ScalarType> precision, ir::StrategyKind strategy, bool triangular_products,
                               int64_t rows, int64_t cols, int64_t batch) {
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  options.precision = precision;
  options.strategy = strategy;
  options.triangular_products = triangular_products;
  return passes::compile_program(program, options);
}

nlohmann::json run_tuning_loop(const TuneProblem& problem, const TuneSettings& settings, const LoopSettings& loop, TuningBackend& backend,
                               const std::string& default_label, const std::string& default_reason) {
  const auto started = Clock::now();
  // The program as the candidates compile it (with the problem's restarts); the key is the
  // program's own.
  dsl::Program program = *problem.program;
  if (problem.gram_restarts) program.gram_restarts = *problem.gram_restarts;
  const ProblemKey key = problem_key(*problem.program, problem.rows, problem.cols, problem.batch, problem.precision);
  std::vector<Trial> trials = backend.candidates();

  // Proxy timing per shape, so that every candidate of a shape is ranked the same way.
  const double m = static_cast<double>(std::min(problem.rows, problem.cols)), n = static_cast<double>(std::max(problem.rows, problem.cols));
  const double iteration_cost = static_cast<double>(program.steps.size()) * (4 * m * m * n + 2 * m * m * m) * static_cast<double>(problem.batch);
  const bool use_proxy = settings.proxy_timing && loop.proxy_steps > 0 && static_cast<int>(program.steps.size()) > loop.proxy_steps &&
                         iteration_cost >= loop.proxy_min_flops;
  const dsl::Program proxy_program = use_proxy ? first_steps(program, loop.proxy_steps) : program;
  const ProxyShape proxy_at = use_proxy ? proxy_shape(problem.rows, problem.cols, problem.batch, loop.proxy_step_max_flops)
                                        : ProxyShape{problem.rows, problem.cols, problem.batch};
  const bool proxy_reduced = proxy_at.rows != problem.rows || proxy_at.cols != problem.cols || proxy_at.batch != problem.batch;

  const std::vector<float> input = gaussian_input(problem.rows * problem.cols * problem.batch, loop.input_seed);
  std::vector<float> output(input.size());
  // The proxy's own input and output when it runs on a smaller shape than the problem's.
  const std::vector<float> reduced_proxy_input =
      proxy_reduced ? gaussian_input(proxy_at.rows * proxy_at.cols * proxy_at.batch, loop.input_seed) : std::vector<float>();
  std::vector<float> reduced_proxy_output(reduced_proxy_input.size());
  const std::vector<float>& proxy_input = proxy_reduced ? reduced_proxy_input : input;
  std::vector<float>& proxy_output = proxy_reduced ? reduced_proxy_output : output;
  int64_t small_rows = 0, small_cols = 0;
  reduced_check_shape(problem.rows, problem.cols, small_rows, small_cols);
  std::vector<float> reduced_input;  // made when a candidate first needs it
  // The f64 references by strategy: of the full shape, or of the reduced one (same input for every
  // candidate of a strategy, so computed once).
  std::map<ir::StrategyKind, Reference> references, reduced_references;
  std::optional<ErrorBounds> bounds;  // those the candidates were checked against, for the record
  // Where the shape's tuning time went, by phase (the record's bench.seconds): what to make cheaper
  // when a budget leaves candidates untimed.
  std::map<std::string, double> phase_ms;
  auto timed_phase = [&](const char* phase, auto&& body) {
    const auto phase_started = Clock::now();
    struct Add {
      std::map<std::string, double>& totals;
      const char* phase;
      Clock::time_point started;
      ~Add() { totals[phase] += std::chrono::duration<double, std::milli>(Clock::now() - started).count(); }
    } add{phase_ms, phase, phase_started};
    return body();
  };

  const double budget_ms = settings.budget_seconds * 1000;
  auto elapsed_ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - started).count(); };
  auto report = [&](size_t index, const char* phase) {
    if (!settings.progress) return;
    settings.progress({static_cast<int>(index + 1), static_cast<int>(trials.size()), trials[index].label, phase});
  };
  auto fail = [](Trial& trial, TrialStatus status, std::string message) {
    trial.status = status;
    trial.message = std::move(message);
  };
  // One run of `built` on the full input into a poisoned output, which must be finite (what a
  // shape checked on its reduced form is asked of at full size). Returns the run's time, or
  // nullopt after marking the trial wrong_result.
  auto finite_run = [&](Trial& trial, BuiltCandidate& built, const std::vector<float>& in, std::vector<float>& out, bool full_shape,
                        const char* what) -> std::optional<double> {
    std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
    const auto run_started = Clock::now();
    built.run(in, out);
    const double run_ms = std::chrono::duration<double, std::milli>(Clock::now() - run_started).count();
    if (settings.tamper_output) settings.tamper_output(trial, out.data(), out.size(), full_shape);
    if (!all_finite(out)) {
      fail(trial, TrialStatus::WrongResult, std::string("non-finite or unwritten output of ") + what);
      return std::nullopt;
    }
    return run_ms;
  };
  auto finite_full_run = [&](Trial& trial, BuiltCandidate& built, const char* what) { return finite_run(trial, built, input, output, true, what); };
  // `output` (a run of `function` on `input`) against the full shape's f64 reference of the trial's
  // strategy, computed the first time a candidate of that strategy needs it.
  auto check_full_output = [&](const Trial& trial, const ir::Function& function) {
    auto cached = references.find(trial.strategy);
    if (cached == references.end())
      cached = timed_phase("reference", [&] { return references.emplace(trial.strategy, reference_of(function, input)).first; });
    if (!bounds) bounds = cached->second.bounds;
    return timed_phase("check", [&] { return compare(output, cached->second); });  // non-finite anywhere in the batch fails too
  };

  auto judge = [&](size_t index) {
    Trial& trial = trials[index];
    if (trial.status != TrialStatus::Pending) return;
    if (!trial.is_default && elapsed_ms() > budget_ms) return fail(trial, TrialStatus::SkippedBudget, "the shape's tuning budget was spent");
    report(index, "check");
    ir::Function function;
    std::unique_ptr<BuiltCandidate> full;
    try {
      function = timed_phase("build", [&] { return backend.schedule(trial.id, program, problem.rows, problem.cols, problem.batch); });
    } catch (const std::exception& error) {
      return fail(trial, TrialStatus::CompileFailed, error.what());
    }
    // The full shape is checked here when its reference is affordable and the check's run is also
    // the first timed one (no proxy); with the proxy, every candidate is checked on the reduced
    // shape and the finalists on the full shape (their full runs, below): what can win is checked
    // at full size all the same, and the candidates that only get ranked cost a reduced run.
    const bool check_full_shape = !use_proxy && iteration_flops(function) <= kFullCheckFlops;
    try {
      if (!use_proxy) full = timed_phase("build", [&] { return backend.build(trial.id, program, function); });
    } catch (const std::exception& error) {
      return fail(trial, TrialStatus::CompileFailed, error.what());
    }
    try {
      double first_run_ms = 0;  // a run of what is timed next, already made
      if (check_full_shape) {
        std::fill(output.begin(), output.end(), std::numeric_limits<float>::quiet_NaN());
        const auto check_started = Clock::now();
        timed_phase("check", [&] { full->run(input, output); });
        const double check_ms = std::chrono::duration<double, std::milli>(Clock::now() - check_started).count();
        if (settings.tamper_output) settings.tamper_output(trial, output.data(), output.size(), false);
        const CheckResult check = check_full_output(trial, function);
        trial.error = check.error;
        if (!check.ok) return fail(trial, TrialStatus::WrongResult, check.message);
        if (!use_proxy) first_run_ms = check_ms;
      } else {
        // The same configuration, batch included (the batch's split over threads or the grid is
        // part of it), on a reduced shape of the same aspect class; checked like a full one.
        const ir::Function reduced = timed_phase("build", [&] { return backend.schedule(trial.id, program, small_rows, small_cols, problem.batch); });
        const auto small = timed_phase("build", [&] { return backend.build(trial.id, program, reduced); });
        if (reduced_input.empty()) reduced_input = gaussian_input(small_rows * small_cols * problem.batch, loop.reduced_input_seed);
        std::vector<float> reduced_output(reduced_input.size(), std::numeric_limits<float>::quiet_NaN());
        timed_phase("check", [&] { small->run(reduced_input, reduced_output); });
        if (settings.tamper_output) settings.tamper_output(trial, reduced_output.data(), reduced_output.size(), false);
        auto cached = reduced_references.find(trial.strategy);
        if (cached == reduced_references.end())
          cached = timed_phase("reference", [&] { return reduced_references.emplace(trial.strategy, reference_of(reduced, reduced_input)).first; });
        CheckResult check = timed_phase("check", [&] { return compare(reduced_output, cached->second); });
        if (!bounds) bounds = cached->second.bounds;
        trial.error = check.error;
        if (!check.ok)
          return fail(trial, TrialStatus::WrongResult,
                      check.message + " (on the reduced shape " + std::to_string(small_rows) + "x" + std::to_string(small_cols) + ")");
      }
      std::unique_ptr<BuiltCandidate> timed;
      if (use_proxy) {
        const ir::Function proxy = timed_phase("build", [&] { return backend.schedule(trial.id, proxy_program, proxy_at.rows, proxy_at.cols, proxy_at.batch); });
        timed = timed_phase("build", [&] { return backend.build(trial.id, proxy_program, proxy); });
        trial.proxy_scale = schedule_flops(function) / std::max(schedule_flops(proxy), 1.0);
        const auto run_ms = timed_phase("time", [&] {
          return finite_run(trial, *timed, proxy_input, proxy_output, !proxy_reduced,
                            proxy_reduced ? "the proxy (the first steps at the proxy's shape)" : "the proxy (the first steps at the full shape)");
        });
        if (!run_ms) return;
        first_run_ms = *run_ms;
      } else {
        timed = std::move(full);
        if (!check_full_shape) {
          const auto run_ms = timed_phase("time", [&] { return finite_full_run(trial, *timed, "the full shape"); });
          if (!run_ms) return;
          first_run_ms = *run_ms;
        }
      }
      report(index, "time");
      const auto pending = std::count_if(trials.begin(), trials.end(), [](const Trial& t) { return t.status == TrialStatus::Pending; });
      TimingSettings timing;
      // An even share of what is left; with the proxy, of the part of the budget that ranking may
      // use (the rest is the finalists' full iterations).
      const double ranking_left_ms = use_proxy ? loop.proxy_ranking_share * budget_ms - elapsed_ms() : budget_ms - elapsed_ms();
      timing.budget_seconds = std::max(0.05, ranking_left_ms / 1000.0 / static_cast<double>(std::max<int64_t>(pending, 1) + 1));
      timing.initial_run_ms = first_run_ms;
      const Timing measured = timed_phase("time", [&] { return timed->time(use_proxy ? proxy_input : input, timing); });
      if (use_proxy) {
        trial.proxy_ranked = true;
        trial.proxy_timing = measured;
        trial.timing = scaled(measured, trial.proxy_scale);
      } else {
        trial.timing = measured;
      }
      trial.status = TrialStatus::Ok;
    } catch (const std::exception& error) {
      fail(trial, TrialStatus::RunFailed, error.what());
    }
  };

  // A failure that leaves the backend unusable (a poisoned CUDA context) stops the judging: every
  // later candidate would fail for its reason, and a retime would overwrite the checked timings.
  std::string stopped;
  auto judge_checked = [&](size_t index) {
    if (!stopped.empty()) {
      if (trials[index].status == TrialStatus::Pending) fail(trials[index], TrialStatus::Pruned, "not judged: " + stopped);
      return;
    }
    judge(index);
    const TrialStatus status = trials[index].status;
    if (status != TrialStatus::RunFailed && status != TrialStatus::CompileFailed && status != TrialStatus::WrongResult) return;
    if (const std::string why = backend.unusable_reason(); !why.empty()) {
      stopped = "the candidate " + trials[index].label + " left the device unusable (" + why + ")";
      trials[index].message += " [it poisoned the CUDA context: " + why + "]";
    }
  };
  for (size_t index = 0; index < trials.size(); ++index) judge_checked(index);
  if (stopped.empty()) {
    std::vector<Trial> more = backend.more_candidates(trials);
    const size_t before = trials.size();
    trials.insert(trials.end(), more.begin(), more.end());
    for (size_t index = before; index < trials.size(); ++index) judge_checked(index);
  }

  // The finalists: the fastest few timed again on the full iteration.
  std::vector<size_t> ranked;
  for (size_t i = 0; i < trials.size(); ++i)
    if (trials[i].status == TrialStatus::Ok) ranked.push_back(i);
  std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return trials[a].timing.p50_ms < trials[b].timing.p50_ms; });
  const size_t top = static_cast<size_t>(std::max(loop.retime_top, 1));
  // After a stop nothing more runs: without the proxy the candidates checked and timed before it
  // can still win; with it none can (a winner needs its full-iteration check).
  if (use_proxy && stopped.empty()) {
    // One finalist's full-iteration timing; false when it failed (then it is wrong_result or
    // run_failed).
    auto retime_full = [&](size_t index, size_t remaining_finalists) {
      Trial& trial = trials[index];
      report(index, "retime");
      try {
        const ir::Function function = timed_phase("build", [&] { return backend.schedule(trial.id, program, problem.rows, problem.cols, problem.batch); });
        const auto built = timed_phase("build", [&] { return backend.build(trial.id, program, function); });
        const auto run_ms = timed_phase("retime", [&] { return finite_full_run(trial, *built, "the full iteration at the full shape"); });
        if (!run_ms) return false;
        if (iteration_flops(function) <= kFullCheckFlops) {
          // The finalist's full run against the f64 reference of the full shape (computed once per
          // strategy): a configuration right on the reduced shape but wrong at this one never wins.
          const CheckResult check = check_full_output(trial, function);
          if (!check.ok) {
            fail(trial, TrialStatus::WrongResult, check.message + " (the finalist's full iteration at the full shape)");
            return false;
          }
          trial.error = std::max(trial.error, check.error);
        }
        TimingSettings timing;
        timing.budget_seconds = std::max(0.05, (budget_ms - elapsed_ms()) / 1000.0 / static_cast<double>(std::max<size_t>(remaining_finalists, 1)));
        timing.initial_run_ms = *run_ms;
        trial.timing = timed_phase("retime", [&] { return built->time(input, timing); });
        trial.finalist = true;
        return true;
      } catch (const std::exception& error) {
        fail(trial, TrialStatus::RunFailed, error.what());
        return false;
      }
    };
    size_t finalists = 0;
    for (size_t r = 0; r < ranked.size() && finalists < top; ++r) {
      // The best estimate always (a winner needs a full-iteration timing; if it fails, the next in
      // rank takes its place); later ones while the budget holds two of their estimated runs.
      if (finalists > 0 && budget_ms - elapsed_ms() < 2 * trials[ranked[r]].timing.p50_ms) break;
      if (retime_full(ranked[r], top - finalists)) ++finalists;
    }
    // The untuned default is always a finalist too: one noisy proxy run (a loaded machine) cannot
    // make the tuner record a winner slower than the default on the full iteration.
    for (size_t index : ranked)
      if (trials[index].is_default && trials[index].status == TrialStatus::Ok && !trials[index].finalist) retime_full(index, 1);
  } else if (ranked.size() > 1 && stopped.empty()) {
    // Every candidate was timed on the full iteration: the top few again (noise on a shared
    // machine), their samples merged.
    for (size_t r = 0; r < std::min(ranked.size(), top); ++r) {
      Trial& trial = trials[ranked[r]];
      const double remaining_ms = budget_ms - elapsed_ms();
      if (remaining_ms < trial.timing.p50_ms * 2) break;  // keep the first timing
      report(ranked[r], "retime");
      try {
        const ir::Function function = timed_phase("build", [&] { return backend.schedule(trial.id, program, problem.rows, problem.cols, problem.batch); });
        const auto built = timed_phase("build", [&] { return backend.build(trial.id, program, function); });
        TimingSettings timing;
        timing.budget_seconds = std::max(0.05, remaining_ms / 1000.0 / static_cast<double>(top));
        const Timing again = timed_phase("retime", [&] { return built->time(input, timing); });
        trial.timing.samples_ms.insert(trial.timing.samples_ms.end(), again.samples_ms.begin(), again.samples_ms.end());
        summarize(trial.timing);
        trial.finalist = true;
      } catch (const std::exception& error) {
        fail(trial, TrialStatus::RunFailed, error.what());
      }
    }
  }

  nlohmann::json bench = stopped.empty() ? backend.bench_fields() : nlohmann::json::object();
  if (!stopped.empty()) bench["stopped"] = stopped;
  bench["budget_s"] = settings.budget_seconds;
  bench["elapsed_s"] = elapsed_ms() / 1000;
  for (const auto& [phase, ms] : phase_ms) bench["seconds"][phase] = ms / 1000;
  bench["timing"] = use_proxy ? "proxy: candidates ranked by their first " + std::to_string(loop.proxy_steps) + " step(s) at " +
                                    (proxy_reduced ? "the proxy shape" : std::string("the full shape")) +
                                    " scaled by the FLOP ratio; finalists timed on the full iteration"
                              : std::string("full iteration");
  if (use_proxy) bench["proxy_shape"] = {{"rows", proxy_at.rows}, {"cols", proxy_at.cols}, {"batch", proxy_at.batch}};
  if (bounds) bench["tolerance"] = tolerance_json(*bounds);
  return make_tuning_entry(problem, key, std::move(bench), trials, loop.tie_tolerance, default_label, default_reason, loop.proxy_steps);
}

nlohmann::json make_tuning_entry(const TuneProblem& problem, const ProblemKey& key, nlohmann::json bench, const std::vector<Trial>& trials,
                                 double tie_tolerance, const std::string& default_label, const std::string& default_reason, int proxy_steps) {
  std::vector<double> p50;
  std::vector<bool> eligible;
  for (const Trial& trial : trials) {
    p50.push_back(trial.timing.p50_ms);
    // Only full-iteration timings compete: an estimate never wins.
    eligible.push_back(trial.status == TrialStatus::Ok && (!trial.proxy_ranked || trial.finalist));
  }
  const std::optional<size_t> winner = pick_winner(p50, eligible, tie_tolerance);
  nlohmann::json entry;
  entry["program"] = problem.program_name;
  entry["program_hash"] = key.program_hash;
  entry["rows"] = problem.rows;
  entry["cols"] = problem.cols;
  entry["batch"] = problem.batch;
  entry["storage"] = key.storage;
  entry["accumulate"] = key.accumulate;
  entry["timestamp"] = utc_timestamp();
  if (problem.gram_restarts) {
    entry["gram_restarts"] = *problem.gram_restarts;
    entry["gram_restarts_source"] = problem.gram_restarts_source.empty() ? "explicit" : problem.gram_restarts_source;
    if (!problem.restart_search.is_null()) entry["restart_search"] = problem.restart_search;
  }
  entry["bench"] = std::move(bench);
  nlohmann::json candidates = nlohmann::json::array();
  std::optional<double> default_ms, vendor_ms;
  bool default_estimated = false, vendor_estimated = false;
  std::string vendor_label;
  for (const Trial& trial : trials) {
    nlohmann::json item = {{"label", trial.label}, {"config", trial.config}, {"status", to_string(trial.status)}};
    if (trial.stage) item["stage"] = *trial.stage;
    if (!trial.message.empty()) item["message"] = trial.message;
    if (trial.error >= 0) item["error"] = trial.error;
    if (trial.proxy_ranked) {
      // p50_ms is of the full iteration: measured for a finalist, else the proxy's estimate.
      item["timing"] = trial.finalist ? "full" : "proxy";
      item["proxy"] = {{"steps", proxy_steps},
                       {"p50_ms", trial.proxy_timing.p50_ms},
                       {"scale", trial.proxy_scale},
                       {"estimate_p50_ms", trial.proxy_timing.p50_ms * trial.proxy_scale},
                       {"repeats", trial.proxy_timing.repeats()}};
    }
    if (trial.finalist) item["finalist"] = true;
    if (trial.status == TrialStatus::Ok) {
      const bool estimated = trial.proxy_ranked && !trial.finalist;
      item["p20_ms"] = trial.timing.p20_ms;
      item["p50_ms"] = trial.timing.p50_ms;
      item["p80_ms"] = trial.timing.p80_ms;
      item["repeats"] = trial.timing.repeats();
      if (trial.is_default) {
        default_ms = trial.timing.p50_ms;
        default_estimated = estimated;
      }
      if (trial.is_vendor && (!vendor_ms || trial.timing.p50_ms < *vendor_ms)) {
        vendor_ms = trial.timing.p50_ms;  // the fastest vendor library: the library at its best
        vendor_label = trial.label;
        vendor_estimated = estimated;
      }
    }
    candidates.push_back(item);
  }
  entry["candidates"] = candidates;
  entry["default"] = {{"label", default_label}, {"reason", default_reason}};
  if (default_ms) {
    entry["default"]["p50_ms"] = *default_ms;
    if (default_estimated) entry["default"]["timing"] = "proxy";
  }
  if (vendor_ms) {
    entry["vendor_p50_ms"] = *vendor_ms;
    entry["vendor_label"] = vendor_label;
    if (vendor_estimated) entry["vendor_timing"] = "proxy";
  }
  if (winner) {
    const Trial& trial = trials[*winner];
    entry["winner"] = {{"label", trial.label}, {"config", trial.config}, {"p50_ms", trial.timing.p50_ms}};
  } else {
    entry["winner"] = nullptr;
  }
  entry["key"] = key.key;
  return entry;
}

}  // namespace orthojit::autotune
