// The CUDA tuner (see cuda_tuner.h).
#include "autotune/cuda_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "autotune/cuda_tile_search.h"
#include "autotune/gram_restart_search.h"
#include "autotune/strategy_heuristic.h"
#include "autotune/timing_harness.h"
#include "autotune/tuning_loop.h"
#include "autotune/tuning_record.h"
#include "cuda/sticky_error.h"
#include "cuda/cuda_backend.h"
#include "cuda/nvrtc_compiler.h"
#include "kernels/cuda_device_headers.h"
#include "passes/pipeline.h"

namespace orthojit::autotune {
namespace {

using Clock = std::chrono::steady_clock;

// The CUDA candidates always compute triangular products as such (their kernels' choice).
ir::Function compile_strategy(const dsl::Program& program, std::optional<ScalarType> precision, ir::StrategyKind strategy, int64_t rows, int64_t cols,
                              int64_t batch) {
  return compile_candidate(program, precision, strategy, true, rows, cols, batch);
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

// A runner as the loop runs it: the check's run through the host (the output poisoned on the
// device first), timing on device buffers with CUDA events.
class CudaBuilt : public BuiltCandidate {
 public:
  CudaBuilt(std::unique_ptr<cuda::CudaRunner> runner, DeviceTimer& timer, const CudaSearchSpace& space)
      : runner_(std::move(runner)), timer_(timer), space_(space) {}
  void run(const std::vector<float>& input, std::vector<float>& output) override {
    const int64_t bytes = static_cast<int64_t>(input.size()) * 4;
    cuda::DeviceBuffer in(bytes), out(bytes);
    in.upload(input.data(), bytes);
    const auto& api = cuda::Device::get().api();
    cuda::check(api.cuMemsetD8Async(out.get(), 0xff, static_cast<size_t>(bytes), nullptr), "poisoning the output");
    runner_->run_device(in.get(), out.get(), nullptr);
    cuda::check(api.cuCtxSynchronize(), "running the candidate");
    out.download(output.data(), bytes);
  }
  Timing time(const std::vector<float>& input, const TimingSettings& settings) override {
    const int64_t bytes = static_cast<int64_t>(input.size()) * 4;
    cuda::DeviceBuffer in(bytes), out(bytes);
    in.upload(input.data(), bytes);
    return timer_.time(*runner_, in.get(), out.get(), space_.min_repeats, space_.max_repeats, std::max(20.0, settings.budget_seconds * 1000));
  }

 private:
  std::unique_ptr<cuda::CudaRunner> runner_;
  DeviceTimer& timer_;
  const CudaSearchSpace& space_;
};

class CudaTuningBackend : public TuningBackend {
 public:
  CudaTuningBackend(const TuneProblem& problem, const CudaCandidate& fallback)
      : problem_(problem), fallback_(fallback), space_(cuda_search_space()), headers_(kernels::cuda_device_headers()) {}

  std::vector<Trial> candidates() override {
    shared_limit_ = cuda::Device::get().info().max_shared_per_block_optin;
    device_sm_ = cuda::Device::get().info().sm;
    multiprocessors_ = std::max(1, cuda::Device::get().info().multiprocessors);
    // The per-product search offers the sm_90a tile where the device runs it (and ORTHOJIT_CUDA_SM90A
    // does not turn it off: class_candidates asks).
    tile_space_ = space_;
    tile_space_.hopper = space_.hopper && device_sm_ == 90;
    // Each strategy's schedule for the full problem (or why it cannot compile), for pruning.
    for (ir::StrategyKind strategy : space_.strategies) {
      try {
        schedules_.emplace(strategy, compile_strategy(*problem_.program, problem_.precision, strategy, problem_.rows, problem_.cols, problem_.batch));
      } catch (const std::exception& error) {
        strategy_errors_[strategy] = error.what();
      }
    }
    std::vector<Trial> trials;
    for (const CudaCandidate& candidate : cuda_candidates(space_, fallback_)) trials.push_back(make_trial(candidate));
    // Per-product tiles, round one (cuda_tile_search.h): each class of products with each tile.
    for (const auto& [strategy, scheduled] : schedules_)
      for (const CudaCandidate& candidate : product_tile_candidates(tile_space_, strategy, scheduled, multiprocessors_)) trials.push_back(make_trial(candidate));
    return trials;
  }

  // Per-product tiles, round two: every class at its fastest tile of round one.
  std::vector<Trial> more_candidates(const std::vector<Trial>& judged) override {
    auto measured = [&](const CudaCandidate& candidate) -> std::optional<double> {
      for (const Trial& trial : judged)
        if (trial.status == TrialStatus::Ok && candidates_.at(trial.id) == candidate) return trial.timing.p50_ms;
      return std::nullopt;
    };
    std::vector<Trial> trials;
    for (const auto& [strategy, scheduled] : schedules_)
      if (const std::optional<double> start_ms = measured({strategy, "generated"}))
        if (auto combined = combined_product_tiles(tile_space_, strategy, scheduled, *start_ms, measured, multiprocessors_)) trials.push_back(make_trial(*combined));
    return trials;
  }

  ir::Function schedule(size_t id, const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch) override {
    return compile_strategy(program, problem_.precision, candidates_.at(id).strategy, rows, cols, batch);
  }

  // The reduced shape may not admit the variant (a tile larger than it is still valid).
  std::unique_ptr<BuiltCandidate> build(size_t id, const dsl::Program& program, const ir::Function& schedule) override {
    const CudaCandidate& candidate = candidates_.at(id);
    cuda::CudaVariant variant = cuda::CudaVariant::parse(candidate.variant);
    // A per-product choice on the proxy's fewer products: by product shape (cuda_tile_search.h).
    if (const auto full = schedules_.find(candidate.strategy); full != schedules_.end())
      variant = variant_for_schedule(variant, full->second, schedule, multiprocessors_);
    return std::make_unique<CudaBuilt>(cuda::build_cuda_runner(program, schedule, variant, headers_), timer_, space_);
  }

  nlohmann::json bench_fields() override {
    return {{"timer", "CUDA events, L2 flushed (memset of 2x L2) before each run"}, {"device", cuda::Device::get().info().describe()}};
  }

  std::string unusable_reason() override { return cuda::poisoned_context_reason(); }

  const CudaSearchSpace& space() const { return space_; }

 private:
  Trial make_trial(const CudaCandidate& candidate) {
    Trial trial = pending_trial(candidates_.size(), candidate, candidate == fallback_, candidate.variant == "cublaslt");
    const auto schedule = schedules_.find(candidate.strategy);
    const auto error = strategy_errors_.find(candidate.strategy);
    if (auto reason = cuda_prune_reason(candidate, schedule == schedules_.end() ? nullptr : &schedule->second,
                                        error == strategy_errors_.end() ? "" : error->second, shared_limit_, device_sm_)) {
      trial.status = TrialStatus::Pruned;
      trial.message = *reason;
    }
    candidates_.push_back(candidate);
    return trial;
  }

  const TuneProblem& problem_;
  CudaCandidate fallback_;
  const CudaSearchSpace& space_;
  CudaSearchSpace tile_space_;  // space_ for the per-product rounds (hopper only on CC 9.0)
  const std::vector<std::pair<std::string, std::string>>& headers_;
  DeviceTimer timer_;
  std::vector<CudaCandidate> candidates_;
  std::map<ir::StrategyKind, ir::Function> schedules_;
  std::map<ir::StrategyKind, std::string> strategy_errors_;
  int shared_limit_ = 0, multiprocessors_ = 132, device_sm_ = 90;
};

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
  std::string default_reason;
  const CudaCandidate fallback = default_cuda_candidate(*problem.program, problem.rows, problem.cols, problem.precision, &default_reason);
  CudaTuningBackend backend(problem, fallback);
  LoopSettings loop;
  loop.tie_tolerance = backend.space().tie_tolerance;
  loop.retime_top = backend.space().retime_top;
  // A GPU runs a large shape's iteration in milliseconds: the proxy pays only from about 1e13
  // FLOPs (tens of milliseconds a run on a current data-centre GPU) up.
  loop.proxy_min_flops = 1e13;
  // And a GPU's efficiency falls steeply below a few waves of tiles: its proxy stays at the full
  // shape (one step of it is already milliseconds), never a smaller one.
  loop.proxy_step_max_flops = 0;
  return run_tuning_loop(problem, settings, loop, backend, fallback.label(), default_reason);
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
    // A winner on the sm_90a tile while ORTHOJIT_CUDA_SM90A turns it off: the runtime's default
    // choice instead (scripts/gpu-check sets the switch after the tile hung or faulted).
    if (const std::string off = cuda::variant_switched_off_reason(cuda::CudaVariant::parse(choice.winner->variant)); !off.empty()) {
      choice.reason = "the CUDA tuning record's winner (" + choice.winner->label() + ", " + path + ") not used: " + off;
      choice.winner.reset();
      return choice;
    }
    choice.gram_restarts = recorded_restarts(entries.at(key.key), static_cast<int>(program.steps.size()));
    char text[64];
    std::snprintf(text, sizeof text, ", %.3g ms", winner.value("p50_ms", 0.0));
    choice.reason = "tuned: " + choice.winner->label() + text + restarts_note(choice.gram_restarts) + " (" + path + ")";
  } catch (const std::exception& error) {
    choice.winner.reset();
    choice.gram_restarts.reset();
    choice.reason = std::string("the CUDA tuning record's winner is unreadable: ") + error.what();
  }
  return choice;
}

}  // namespace orthojit::autotune
