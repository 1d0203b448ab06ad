// The CPU tuner (see tuner.h): the CPU backend of the shared tuning loop.
#include "autotune/tuner.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "autotune/strategy_heuristic.h"
#include "autotune/timing_harness.h"
#include "cpu/cpu_executable.h"
#include "cpu/openblas_library.h"
#include "cpu/vendor_gemm.h"
#include "passes/pipeline.h"

namespace orthojit::autotune {
namespace {

ir::Function compile_for(const dsl::Program& program, std::optional<ScalarType> precision, const Candidate& candidate, int64_t rows, int64_t cols,
                         int64_t batch) {
  return compile_candidate(program, precision, candidate.strategy, candidate.triangular, rows, cols, batch);
}

cpu::CpuOptions cpu_options_for(const Candidate& candidate, int threads) {
  cpu::CpuOptions options;
  options.threads = threads;
  options.blocking = candidate.blocking();
  options.engine = candidate.engine;
  if (auto isa = candidate.cpu_isa()) options.isa = *isa;
  return options;
}

bool is_vendor(const Candidate& candidate) { return candidate.engine != cpu::ProductEngine::Jit; }

// A CPU executable as the loop runs it: host buffers, timed by the host clock after a cache flush.
class CpuBuilt : public BuiltCandidate {
 public:
  CpuBuilt(const ir::Function& schedule, const cpu::CpuOptions& options) : executable_(schedule, options) {}
  void run(const std::vector<float>& input, std::vector<float>& output) override { executable_.run(input.data(), output.data()); }
  Timing time(const std::vector<float>& input, const TimingSettings& settings) override {
    std::vector<float> output(input.size());
    return time_repeated([&] { executable_.run(input.data(), output.data()); }, settings);
  }

 private:
  cpu::CpuExecutable executable_;
};

class CpuTuningBackend : public TuningBackend {
 public:
  CpuTuningBackend(const TuneProblem& problem, const TuneSettings& settings, const Candidate& fallback)
      : problem_(problem), threads_(settings.threads), fallback_(fallback), space_(search_space("cpu")),
        storage_(passes::effective_policy(problem.program->policy, problem.precision).storage) {
    // Can gram be compiled at all (every step an odd polynomial)?
    try {
      Candidate gram;
      gram.strategy = ir::StrategyKind::Gram;
      compile_for(*problem.program, problem.precision, gram, problem.rows, problem.cols, 1);
    } catch (const std::exception& error) {
      gram_error_ = error.what();
    }
  }

  std::vector<Trial> candidates() override {
    std::vector<Candidate> first = stage_one_candidates(space_);
    // The untuned default goes first (it is always timed, and it wins ties), then the other
    // triangular strategy on the default engine of the bf16 products, the vendor libraries (so
    // that "vs best vendor" is against every library even when the budget runs out; measured in
    // docs/autotuning.md), the other engines' triangular candidates (measured slower per
    // instruction: cpu/bf16_engine.h), and the dense variants: when the budget runs out on a
    // large shape, what was skipped is what mattered least.
    auto priority = [&](const Candidate& candidate) {
      if (candidate == fallback_) return 0;
      if (!is_vendor(candidate) && candidate.triangular && candidate.kernel == fallback_.kernel) return 1;
      if (is_vendor(candidate) && candidate.triangular) return 2;
      if (!is_vendor(candidate) && candidate.triangular) return 3;
      return 4;
    };
    std::stable_sort(first.begin(), first.end(), [&](const Candidate& a, const Candidate& b) { return priority(a) < priority(b); });
    return add(first);
  }

  // Stage 2: the other blockings of the fastest correct jit configuration.
  std::vector<Trial> more_candidates(const std::vector<Trial>& judged) override {
    std::optional<size_t> best;
    for (size_t i = 0; i < judged.size(); ++i)
      if (judged[i].status == TrialStatus::Ok && !is_vendor(candidates_[judged[i].id]) &&
          (!best || judged[i].timing.p50_ms < judged[*best].timing.p50_ms))
        best = i;
    if (!best) return {};
    return add(stage_two_candidates(space_, candidates_[judged[*best].id]));
  }

  ir::Function schedule(size_t id, const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch) override {
    return compile_for(program, problem_.precision, candidates_.at(id), rows, cols, batch);
  }

  std::unique_ptr<BuiltCandidate> build(size_t id, const dsl::Program&, const ir::Function& schedule) override {
    return std::make_unique<CpuBuilt>(schedule, cpu_options_for(candidates_.at(id), threads_));
  }

  nlohmann::json bench_fields() override {
    return {{"threads", threads_},
            {"flush_bytes", cache_flush_bytes()},
            {"warmup", "one run (kept as a sample when longer than 1 s)"},
            {"blas", std::string("OpenBLAS ") + cpu::openblas_kernel_name()},
            {"blas_coretype", cpu::openblas_coretype_origin()},
            {"onednn", cpu::onednn_description()}};
  }

  const SearchSpace& space() const { return space_; }

 private:
  std::vector<Trial> add(const std::vector<Candidate>& candidates) {
    std::vector<Trial> trials;
    for (const Candidate& candidate : candidates) {
      Trial trial = pending_trial(candidates_.size(), candidate, candidate == fallback_, is_vendor(candidate));
      trial.stage = candidate.stage;
      if (auto reason = prune_reason(candidate, problem_.rows, problem_.cols, gram_error_, accepted_, storage_)) {
        trial.status = TrialStatus::Pruned;
        trial.message = *reason;
      } else {
        accepted_.push_back(candidate);
      }
      candidates_.push_back(candidate);
      trials.push_back(trial);
    }
    return trials;
  }

  const TuneProblem& problem_;
  int threads_;
  Candidate fallback_;
  const SearchSpace& space_;
  ScalarType storage_;
  std::string gram_error_;
  std::vector<Candidate> candidates_, accepted_;
};

}  // namespace

std::unique_ptr<cpu::CpuExecutable> build_candidate(const TuneProblem& problem, const Candidate& candidate, int threads) {
  return std::make_unique<cpu::CpuExecutable>(compile_for(*problem.program, problem.precision, candidate, problem.rows, problem.cols, problem.batch),
                                              cpu_options_for(candidate, threads));
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
  candidate.strategy = choice.strategy;
  // The default path's engine of the bf16 products, named (amx where usable): the untuned default
  // is one of the searched candidates.
  candidate.kernel = default_kernel(standard.policy.storage);
  return candidate;
}

nlohmann::json tune_shape(const TuneProblem& problem, const TuneSettings& settings) {
  std::string default_reason;
  const Candidate fallback = default_candidate(*problem.program, problem.rows, problem.cols, problem.precision, &default_reason);
  CpuTuningBackend backend(problem, settings, fallback);
  LoopSettings loop;
  loop.tie_tolerance = backend.space().tie_tolerance;
  loop.retime_top = backend.space().retime_top;
  return run_tuning_loop(problem, settings, loop, backend, fallback.label(), default_reason);
}

}  // namespace orthojit::autotune
