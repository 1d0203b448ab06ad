// The CUDA tuner (see cuda_tuner.h).
#include "autotune/cuda_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "autotune/reference_check.h"
#include "autotune/strategy_heuristic.h"
#include "autotune/timing_harness.h"
#include "autotune/tuning_record.h"
#include "cuda/cuda_backend.h"
#include "cuda/nvrtc_compiler.h"
#include "kernels/cuda_device_headers.h"
#include "passes/pipeline.h"
#include "reference/random_matrix.h"

namespace orthojit::autotune {
namespace {

using Clock = std::chrono::steady_clock;

ir::Function compile_strategy(const TuneProblem& problem, const std::string& strategy, int64_t rows, int64_t cols, int64_t batch) {
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  options.precision = problem.precision;
  options.strategy = strategy == "gram" ? ir::StrategyKind::Gram : ir::StrategyKind::Standard;
  return passes::compile_program(*problem.program, options);
}

// Device-side timing: CUDA events around one call, the L2 flushed before each.
class DeviceTimer {
 public:
  DeviceTimer() : flush_(2 * static_cast<int64_t>(cuda::Device::get().info().l2_bytes)) {}
  Timing time(const cuda::CudaRunner& runner, CUdeviceptr input, CUdeviceptr output, int min_repeats, int max_repeats, double budget_ms) {
    const auto& api = cuda::Device::get().api();
    runner.run_device(input, output, nullptr);  // warm-up (module load, cuBLAS heuristics)
    cuda::check(api.cuCtxSynchronize(), "warm-up");
    Timing timing;
    const auto started = Clock::now();
    while (timing.repeats() < max_repeats) {
      const double spent = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
      if (timing.repeats() >= min_repeats && spent > budget_ms) break;
      cuda::check(api.cuMemsetD8Async(flush_.get(), static_cast<unsigned char>(timing.repeats()), static_cast<size_t>(flush_.bytes()), nullptr), "L2 flush");
      events_.start(nullptr);
      runner.run_device(input, output, nullptr);
      timing.samples_ms.push_back(events_.stop(nullptr));
    }
    summarize(timing);
    return timing;
  }

 private:
  cuda::DeviceBuffer flush_;
  cuda::EventTimer events_;
};

// Runs `runner` on `input` into a poisoned output and returns the output.
std::vector<float> run_checked(const cuda::CudaRunner& runner, const std::vector<float>& input) {
  const int64_t bytes = static_cast<int64_t>(input.size()) * 4;
  cuda::DeviceBuffer in(bytes), out(bytes);
  in.upload(input.data(), bytes);
  const auto& api = cuda::Device::get().api();
  cuda::check(api.cuMemsetD8Async(out.get(), 0xff, static_cast<size_t>(bytes), nullptr), "poisoning the output");
  runner.run_device(in.get(), out.get(), nullptr);
  cuda::check(api.cuCtxSynchronize(), "running the candidate");
  std::vector<float> output(input.size());
  out.download(output.data(), bytes);
  return output;
}

}  // namespace

DeviceFingerprint cuda_fingerprint() {
  const cuda::DeviceInfo& info = cuda::Device::get().info();
  DeviceFingerprint fingerprint;
  fingerprint.backend = "cuda";
  fingerprint.device = info.name;
  fingerprint.isa = info.arch();
  fingerprint.cores = info.multiprocessors;
  fingerprint.compiler = "NVRTC " + cuda::nvrtc_version();
  fingerprint.orthojit = ORTHOJIT_VERSION;
  return fingerprint;
}

CudaCandidate default_cuda_candidate(const dsl::Program& program, int64_t rows, int64_t cols, std::optional<ScalarType> precision, std::string* reason) {
  const Candidate cpu_default = default_candidate(program, rows, cols, precision, reason);
  return {cpu_default.strategy, "generated"};
}

nlohmann::json tune_shape_cuda(const TuneProblem& problem, const TuneSettings& settings) {
  const auto started = Clock::now();
  const CudaSearchSpace& space = cuda_search_space();
  const cuda::Device& device = cuda::Device::get();
  const int shared_limit = device.info().max_shared_per_block_optin;
  const auto& headers = kernels::cuda_device_headers();
  const ProblemKey key = problem_key(*problem.program, problem.rows, problem.cols, problem.batch, problem.precision);
  std::string default_reason;
  const CudaCandidate fallback = default_cuda_candidate(*problem.program, problem.rows, problem.cols, problem.precision, &default_reason);

  // Each strategy's schedule for the full problem (or why it cannot compile).
  std::map<std::string, ir::Function> schedules;
  std::map<std::string, std::string> strategy_errors;
  for (const auto& strategy : space.strategies) {
    try {
      schedules.emplace(strategy, compile_strategy(problem, strategy, problem.rows, problem.cols, problem.batch));
    } catch (const std::exception& error) {
      strategy_errors[strategy] = error.what();
    }
  }

  const auto values = reference::gaussian_values(problem.rows * problem.cols * problem.batch, 20261201);
  const std::vector<float> input(values.begin(), values.end());
  const int64_t bytes = static_cast<int64_t>(input.size()) * 4;
  cuda::DeviceBuffer device_input(bytes), device_output(bytes);
  device_input.upload(input.data(), bytes);
  DeviceTimer timer;

  struct Trial {
    CudaCandidate candidate;
    std::string status = "pending", message;
    Timing timing;
    double error = -1;
    bool is_default = false;
  };
  std::vector<Trial> trials;
  for (const CudaCandidate& candidate : cuda_candidates(space, fallback)) {
    Trial trial;
    trial.candidate = candidate;
    trial.is_default = candidate == fallback;
    const auto schedule = schedules.find(candidate.strategy);
    const std::string strategy_error = strategy_errors.count(candidate.strategy) ? strategy_errors[candidate.strategy] : "";
    if (auto reason = cuda_prune_reason(candidate, schedule == schedules.end() ? nullptr : &schedule->second, strategy_error, shared_limit)) {
      trial.status = "pruned";
      trial.message = *reason;
    }
    trials.push_back(trial);
  }

  const double budget_ms = settings.budget_seconds * 1000;
  auto elapsed_ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - started).count(); };
  // The f64 references by strategy, of the full shape or of the reduced one (computed once each).
  std::map<std::string, Reference> references, reduced_references;
  std::optional<ErrorBounds> bounds;  // those the candidates were checked against, for the record
  std::map<size_t, std::unique_ptr<cuda::CudaRunner>> runners;
  for (size_t index = 0; index < trials.size(); ++index) {
    Trial& trial = trials[index];
    if (trial.status != "pending") continue;
    if (!trial.is_default && elapsed_ms() > budget_ms) {
      trial.status = "skipped_budget";
      trial.message = "the shape's tuning budget was spent";
      continue;
    }
    if (settings.progress) settings.progress({static_cast<int>(index + 1), static_cast<int>(trials.size()), trial.candidate.label(), "check"});
    const cuda::CudaVariant variant = cuda::CudaVariant::parse(trial.candidate.variant);
    const ir::Function& function = schedules.at(trial.candidate.strategy);
    std::unique_ptr<cuda::CudaRunner> runner;
    try {
      runner = cuda::build_cuda_runner(*problem.program, function, variant, headers);
    } catch (const std::exception& error) {
      trial.status = "compile_failed";
      trial.message = error.what();
      continue;
    }
    try {
      std::vector<float> output = run_checked(*runner, input);
      if (settings.tamper_output) settings.tamper_output(Candidate{}, output.data(), output.size());
      if (!std::all_of(output.begin(), output.end(), [](float value) { return std::isfinite(value); })) {
        trial.status = "wrong_result";
        trial.message = "non-finite or unwritten output";
        continue;
      }
      CheckResult check;
      if (iteration_flops(function) <= kFullCheckFlops) {
        auto cached = references.find(trial.candidate.strategy);
        if (cached == references.end()) cached = references.emplace(trial.candidate.strategy, reference_of(function, input)).first;
        check = compare(output, cached->second);
        if (!bounds) bounds = cached->second.bounds;
      } else {
        // The same variant, batch included (it sets the grid), on a reduced shape of the same
        // aspect class; checked like a full one.
        int64_t small_rows = 0, small_cols = 0;
        reduced_check_shape(problem.rows, problem.cols, small_rows, small_cols);
        const ir::Function reduced = compile_strategy(problem, trial.candidate.strategy, small_rows, small_cols, problem.batch);
        const auto reduced_values = reference::gaussian_values(small_rows * small_cols * problem.batch, 7);
        const std::vector<float> reduced_input(reduced_values.begin(), reduced_values.end());
        // The reduced shape may not admit the variant (a tile larger than it is still valid).
        auto reduced_runner = cuda::build_cuda_runner(*problem.program, reduced, variant, headers);
        std::vector<float> reduced_output = run_checked(*reduced_runner, reduced_input);
        if (settings.tamper_output) settings.tamper_output(Candidate{}, reduced_output.data(), reduced_output.size());
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
        continue;
      }
      if (settings.progress) settings.progress({static_cast<int>(index + 1), static_cast<int>(trials.size()), trial.candidate.label(), "time"});
      const size_t remaining = static_cast<size_t>(std::count_if(trials.begin(), trials.end(), [](const Trial& t) { return t.status == "pending"; }));
      const double share_ms = std::max(20.0, (budget_ms - elapsed_ms()) / static_cast<double>(remaining + 1));
      trial.timing = timer.time(*runner, device_input.get(), device_output.get(), space.min_repeats, space.max_repeats, share_ms);
      trial.status = "ok";
      runners[index] = std::move(runner);
    } catch (const std::exception& error) {
      trial.status = "run_failed";
      trial.message = error.what();
    }
  }
  // Re-time the top few, then pick.
  std::vector<size_t> ranked;
  for (size_t i = 0; i < trials.size(); ++i)
    if (trials[i].status == "ok") ranked.push_back(i);
  std::sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return trials[a].timing.p50_ms < trials[b].timing.p50_ms; });
  for (size_t r = 0; r < std::min<size_t>(ranked.size(), static_cast<size_t>(space.retime_top)) && ranked.size() > 1; ++r) {
    Trial& trial = trials[ranked[r]];
    if (settings.progress) settings.progress({static_cast<int>(ranked[r] + 1), static_cast<int>(trials.size()), trial.candidate.label(), "retime"});
    const Timing again = timer.time(*runners.at(ranked[r]), device_input.get(), device_output.get(), space.min_repeats, space.max_repeats, 50.0);
    trial.timing.samples_ms.insert(trial.timing.samples_ms.end(), again.samples_ms.begin(), again.samples_ms.end());
    summarize(trial.timing);
  }
  nlohmann::json bench = {{"budget_s", settings.budget_seconds},
                          {"timer", "CUDA events, L2 flushed (memset of 2x L2) before each run"},
                          {"device", device.info().describe()},
                          {"elapsed_s", elapsed_ms() / 1000}};
  if (bounds) bench["tolerance"] = tolerance_json(*bounds);
  std::vector<TrialOutcome> outcomes;
  for (const Trial& trial : trials)
    outcomes.push_back({trial.candidate.label(), trial.candidate.to_json(), trial.status, trial.message, trial.timing, trial.error, trial.is_default,
                        trial.candidate.variant == "cublaslt", std::nullopt});
  return make_tuning_entry(problem, key, std::move(bench), outcomes, space.tie_tolerance, fallback.label(), default_reason);
}

TunedCudaChoice lookup_tuned_cuda(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, std::optional<ScalarType> precision) {
  TunedCudaChoice choice;
  DeviceFingerprint here;
  try {
    here = cuda_fingerprint();
  } catch (const std::exception& error) {
    choice.reason = error.what();
    return choice;
  }
  const std::string path = default_tuning_path(here);
  const LoadedRecords loaded = load_tuning_file(path);
  if (!loaded.file) {
    choice.reason = loaded.warning.empty() ? "no CUDA tuning record" : loaded.warning;
    return choice;
  }
  if (auto mismatch = here.mismatch(loaded.file->fingerprint)) {
    choice.reason = "CUDA tuning records in " + path + " not used: " + *mismatch;
    return choice;
  }
  const ProblemKey key = problem_key(program, rows, cols, batch, precision);
  const auto& entries = loaded.file->entries;
  if (!entries.contains(key.key) || entries.at(key.key).value("winner", nlohmann::json()).is_null()) {
    choice.reason = "no CUDA tuning record with a winner for this shape";
    return choice;
  }
  try {
    const auto& winner = entries.at(key.key).at("winner");
    choice.winner = CudaCandidate::from_json(winner.at("config"));
    char text[64];
    std::snprintf(text, sizeof text, ", %.3g ms", winner.value("p50_ms", 0.0));
    choice.reason = "tuned: " + choice.winner->label() + text + " (" + path + ")";
  } catch (const std::exception& error) {
    choice.reason = std::string("the CUDA tuning record's winner is unreadable: ") + error.what();
  }
  return choice;
}

}  // namespace orthojit::autotune
