// The one tuning loop every backend shares. As in Triton's autotuner
// (https://triton-lang.org/main/python-api/generated/triton.autotune.html), a backend supplies
// only what differs between devices: its candidates in order, how to schedule and build one, how
// to run it and how to time it. Everything that decides what wins is here, once: the check of
// every candidate against the f64 reference (reference_check.h), the budget (which candidates are
// skipped when it is spent), the statuses, the proxy timing of large shapes and the re-timing of
// the finalists, the pick of the winner and the record entry (make_tuning_entry).
//
// Judging a candidate, in order:
//   1. build it (compile_failed with the compiler's message);
//   2. check it against the reference: on the full shape while the reference costs at most
//      kFullCheckFlops per matrix and the shape is timed in full (the check's run is then the
//      first timed one), else the same configuration on the reduced shape (reduced_check_shape),
//      and with the proxy the finalists on the full shape too (step 4); a failing output is
//      wrong_result with the measure and never wins;
//   3. time it: the full iteration, or, for a shape whose iteration costs at least
//      LoopSettings::proxy_min_flops, a proxy: the same configuration with only the program's
//      first `proxy_steps` steps, on the full shape, or on a smaller one of the same aspect ratio
//      where one step of the full shape is expensive (proxy_shape: one step of 4096x14336 is
//      seconds). Newton–Schulz repeats the same products every step, so the proxy's time scaled
//      by the FLOP ratio of the two schedules (which also counts gram's once-per-iteration
//      products R = X·Xᵀ and Q·X right) ranks candidates at a fraction of the cost. The proxy's
//      output must be finite (at the full shape it runs every kernel of it, edge tiles and thread
//      splits included). Ranking spends at most LoopSettings::proxy_ranking_share of the budget
//      on repeats, so that the finalists' full iterations fit after every candidate is judged;
//   4. the finalists (the `retime_top` fastest) are timed again on the full iteration: a
//      proxy-ranked finalist's first full run is checked for being finite and, while the full
//      reference costs at most kFullCheckFlops, against it (a run that fails makes it
//      wrong_result, and the next in rank takes its place), and only full-iteration
//      timings are compared for the winner. The best estimate is always re-timed, later ones
//      while the budget holds twice their estimate; with the proxy, the untuned default is
//      always a finalist as well (the winner is never slower than it on the full iteration).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autotune/error_measure.h"
#include "autotune/timing_harness.h"
#include "autotune/tuning_options.h"
#include "dsl/ast.h"
#include "ir/function.h"
#include "support/scalar_type.h"

namespace orthojit::autotune {

struct TuneProblem {
  const dsl::Program* program = nullptr;
  std::string program_name;  // for the record
  int64_t rows = 0, cols = 0, batch = 1;
  std::optional<ScalarType> precision;  // overrides the program's storage type
  // The gram restarts every candidate compiles with (nullopt: the program's own), written to the
  // record as "gram_restarts" with "gram_restarts_source" ("auto": gram_restart_search.h, whose
  // result goes in as "restart_search"; "explicit": given by the user). The record's key stays the
  // program's: the runtime finds the entry by the program and applies its restarts.
  std::optional<std::vector<int>> gram_restarts;
  std::string gram_restarts_source;
  nlohmann::json restart_search;
};

struct TuneProgress {
  int candidate = 0, candidates = 0;  // 1-based index of the candidate being worked on
  std::string label, phase;           // phase: "check", "time", "retime"
};

struct Trial;

struct TuneSettings {
  double budget_seconds = 20;  // for this shape, all candidates together (the default candidate is always timed)
  int threads = 0;             // 0: all cores
  // Rank the candidates of a large shape by the proxy (see the top of this file); false: every
  // candidate on the full iteration.
  bool proxy_timing = true;
  std::function<void(const TuneProgress&)> progress;
  // Test hook: called with every candidate's check output before the check (to simulate a wrong
  // kernel), and with every output the loop checks for being finite (`full_shape` true: the proxy's
  // or a finalist's full-shape output).
  std::function<void(const Trial& trial, float* output, size_t count, bool full_shape)> tamper_output;
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

// Which candidate wins: the fastest p50 among the eligible, except that any eligible candidate
// within `tie_tolerance` of the fastest and earlier in `order` wins instead. Returns the index into
// `p50_ms`, or nullopt when none is eligible.
std::optional<size_t> pick_winner(const std::vector<double>& p50_ms, const std::vector<bool>& eligible, double tie_tolerance);

// One candidate as the loop sees it: what the backend says about it, and what became of it.
struct Trial {
  // From the backend.
  size_t id = 0;  // the backend's own index of the candidate (its Candidate / CudaCandidate)
  std::string label;
  nlohmann::json config;
  ir::StrategyKind strategy = ir::StrategyKind::Standard;  // keys the references (same schedule values)
  bool is_default = false, is_vendor = false;
  std::optional<int> stage;
  // The outcome.
  TrialStatus status = TrialStatus::Pending;
  std::string message;
  double error = -1;  // the check's tile measure, when checked
  Timing timing;      // of the full iteration: measured, or the proxy's scaled (proxy_ranked)
  bool proxy_ranked = false;  // ranked by the proxy's timing
  Timing proxy_timing;        // the proxy's own samples (proxy_ranked)
  double proxy_scale = 0;     // full-iteration FLOPs / the proxy's
  bool finalist = false;      // re-timed on the full iteration
};

// A pending trial for a backend's candidate (any type with label(), to_json() and strategy): the
// fields every backend fills alike; pruning and the stage are the backend's.
template <class BackendCandidate>
Trial pending_trial(size_t id, const BackendCandidate& candidate, bool is_default, bool is_vendor) {
  Trial trial;
  trial.id = id;
  trial.label = candidate.label();
  trial.config = candidate.to_json();
  trial.strategy = candidate.strategy;
  trial.is_default = is_default;
  trial.is_vendor = is_vendor;
  return trial;
}

// A candidate built for one schedule, ready to run.
class BuiltCandidate {
 public:
  virtual ~BuiltCandidate() = default;
  // One run of `input` (the whole batch, f32) into `output` (same size, poisoned with NaN by the
  // loop): the check's run.
  virtual void run(const std::vector<float>& input, std::vector<float>& output) = 0;
  // Repeated runs on `input` as this backend times them (TimingSettings: the budget and the run
  // already made; a backend applies its own repeat bounds).
  virtual Timing time(const std::vector<float>& input, const TimingSettings& settings) = 0;
};

class TuningBackend {
 public:
  virtual ~TuningBackend() = default;
  // The candidates in their order (the untuned default first: it is always timed and wins ties);
  // pruned ones already have status Pruned and the reason.
  virtual std::vector<Trial> candidates() = 0;
  // Candidates to judge after the first round, given every trial so far (CPU: the other blockings
  // of the fastest correct jit configuration). Default: none.
  virtual std::vector<Trial> more_candidates(const std::vector<Trial>& judged);
  // `program` (the problem's, or its first steps for a proxy) compiled with trial `id`'s strategy
  // and products for rows x cols x batch. Throws when it cannot compile.
  virtual ir::Function schedule(size_t id, const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch) = 0;
  // Trial `id` built for `schedule` (compiled from `program`). Throws when it cannot be built.
  virtual std::unique_ptr<BuiltCandidate> build(size_t id, const dsl::Program& program, const ir::Function& schedule) = 0;
  // The backend's fields of the record's "bench" (timer, device, libraries).
  virtual nlohmann::json bench_fields() = 0;
  // Asked after a candidate failed: empty while the backend can go on; else why every later
  // candidate would fail for a reason that is not its own (CUDA: a context the fault poisoned).
  // The loop then judges nothing more, says which candidate did it, and the record says
  // "stopped" (runtime/records.cpp ends the tune there, keeping what was tuned).
  virtual std::string unusable_reason() { return ""; }
};

struct LoopSettings {
  double tie_tolerance = 0.02;
  int retime_top = 3;
  // Proxy timing (see the top of this file): at 0 steps, or for a program of at most proxy_steps
  // steps, every candidate is timed on the full iteration.
  int proxy_steps = 1;
  // The shape's iteration cost from which candidates are ranked by the proxy, in dense FLOPs of
  // the standard iteration (20·m²n + 10·m³ per matrix for five steps, times the batch). 1e10 is
  // about a tenth of a second on two cores: below it a full run costs little more than the proxy's
  // timer resolution and warm-up.
  double proxy_min_flops = 1e10;
  // The proxy runs on a smaller shape when one step of the full one costs more than this (dense
  // FLOPs of a standard step, times the batch): proxy_shape. 4e10 is about 0.2 s on two Zen 4
  // cores (bf16 on vdpbf16ps); one step of 4096x14336 is 1.1e12, 5 s there: twenty candidates
  // ranked on it would take the model's whole budget.
  // 0: always the full shape (the CUDA tuner's choice).
  double proxy_step_max_flops = 4e10;
  // With the proxy, the fraction of the shape's budget that ranking may spend on repeated timings
  // before the finalists' full iterations (each candidate gets an even share of it, at least the
  // harness's minimum of repeats).
  double proxy_ranking_share = 0.4;
  // Seeds of the check inputs (fixed: every candidate of a shape sees the same matrices).
  uint64_t input_seed = 20261201, reduced_input_seed = 7;
};

// Tunes `problem` with `backend`: the record entry (tuning_record.h's layout).
nlohmann::json run_tuning_loop(const TuneProblem& problem, const TuneSettings& settings, const LoopSettings& loop, TuningBackend& backend,
                               const std::string& default_label, const std::string& default_reason);

// The tuning-record entry of one problem (the layout of tuning_record.h): every candidate (status,
// message, error, timings; for a proxy-ranked one "timing": "proxy" with the proxy's steps,
// measured median and scale; for a finalist "finalist": true), the default's and the vendor's
// medians, and the winner: pick_winner over the ok trials whose timing is of the full iteration.
nlohmann::json make_tuning_entry(const TuneProblem& problem, const ProblemKey& key, nlohmann::json bench, const std::vector<Trial>& trials,
                                 double tie_tolerance, const std::string& default_label, const std::string& default_reason, int proxy_steps);

// Dense-equivalent FLOPs of a schedule's products (2·m·n·k per gemm, times the batch): what the
// proxy's time is scaled by.
double schedule_flops(const ir::Function& function);

// The shape the proxy runs on: the problem's own while one step of it costs at most
// `max_step_flops`; above, fewer matrices of a batch (not below kProxyMinBatch), then both sides
// scaled by one factor (the aspect ratio kept: the same strategy trade-off and the same kernels'
// edge classes) in multiples of 32, no smaller than kProxyMinSide. Candidates are ranked on it by
// their time scaled with the FLOP ratio; only the finalists run the problem's shape, where a
// kernel that fails there (an edge tile, a thread split) is caught by their finite check and the
// winner is always one of them.
struct ProxyShape {
  int64_t rows = 0, cols = 0, batch = 1;
};
inline constexpr int64_t kProxyMinBatch = 4, kProxyMinSide = 256;
ProxyShape proxy_shape(int64_t rows, int64_t cols, int64_t batch, double max_step_flops);

// The program reduced to its first `steps` steps (gram restarts beyond them dropped): the proxy.
dsl::Program first_steps(const dsl::Program& program, int steps);

// A candidate's schedule, as every backend builds it: the program (its restarts already the
// problem's) compiled for one strategy at a shape (the problem's, the proxy's or the reduced
// check's), with or without triangular products.
ir::Function compile_candidate(const dsl::Program& program, std::optional<ScalarType> precision, ir::StrategyKind strategy, bool triangular_products,
                               int64_t rows, int64_t cols, int64_t batch);

}  // namespace orthojit::autotune
