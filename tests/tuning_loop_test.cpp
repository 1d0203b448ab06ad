// The shared tuning loop (autotune/tuning_loop.h) on a fake backend whose candidates compute the
// iteration with the f64 reference interpreter (so they are right unless a bug is planted) and
// whose timings are made up per candidate: planted wrong results are rejected, the budget skips
// the right candidates, the finalists are timed on the full iteration, and a proxy ranking never
// lets a candidate that fails a check win. Also: a record of the earlier format still loads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "autotune/record_lookup.h"
#include "cpu/build_status.h"
#include "cpu/openblas_library.h"
#include "autotune/tuning_loop.h"
#include "autotune/tuning_record.h"
#include "autotune/device_fingerprint.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"
#include "runtime/orthogonalize.h"

namespace orthojit::autotune {
namespace {

// How one fake candidate behaves.
struct FakeCandidate {
  std::string label;
  ir::StrategyKind strategy = ir::StrategyKind::Standard;
  double ms_per_gflop = 1;        // its made-up speed on the full iteration
  double proxy_ms_per_gflop = 0;  // on the proxy (0: the same as on the full iteration)
  bool wrong = false;             // every output slightly wrong (fails the reference check)
  bool nan_on_second_full_build = false;  // its second full-iteration build writes a NaN (the finalist run)
  double sleep_ms = 0;            // spent in each time() call (real time, for the budget)
  bool pruned = false;
  bool skewed_on_second_full_build = false;  // its second full-iteration build is finite but wrong
};

struct FakeLog {
  std::map<std::string, int> full_builds, proxy_builds, full_timings, proxy_timings;
  std::map<std::string, std::vector<int64_t>> proxy_build_batches, full_build_batches;  // the batch of each build
};

class FakeBuilt : public BuiltCandidate {
 public:
  FakeBuilt(const FakeCandidate& candidate, ir::Function schedule, bool proxy, bool poison, FakeLog& log, bool skew = false)
      : candidate_(candidate), schedule_(std::move(schedule)), proxy_(proxy), poison_(poison), skew_(skew), log_(log) {}
  void run(const std::vector<float>& input, std::vector<float>& output) override {
    const std::vector<double> values = reference::interpret(schedule_, std::vector<double>(input.begin(), input.end()));
    for (size_t i = 0; i < values.size(); ++i) output[i] = static_cast<float>(values[i]);
    if (candidate_.wrong)
      for (size_t i = 0; i < output.size(); i += 5) output[i] *= 1.05f;  // a diffuse error, well over the f32 bounds
    if (poison_) output[output.size() / 2] = std::nanf("");
    if (skew_) output[output.size() / 2] += 0.5f;  // one wrong element: one bad tile
  }
  Timing time(const std::vector<float>&, const TimingSettings&) override {
    (proxy_ ? log_.proxy_timings : log_.full_timings)[candidate_.label]++;
    if (candidate_.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(candidate_.sleep_ms));
    const double rate = proxy_ && candidate_.proxy_ms_per_gflop > 0 ? candidate_.proxy_ms_per_gflop : candidate_.ms_per_gflop;
    Timing timing;
    timing.samples_ms = {rate * schedule_flops(schedule_) * 1e-9, rate * schedule_flops(schedule_) * 1e-9};
    summarize(timing);
    return timing;
  }

 private:
  FakeCandidate candidate_;
  ir::Function schedule_;
  bool proxy_, poison_, skew_;
  FakeLog& log_;
};

class FakeBackend : public TuningBackend {
 public:
  FakeBackend(const TuneProblem& problem, std::vector<FakeCandidate> candidates) : problem_(problem), candidates_(std::move(candidates)) {}
  std::vector<Trial> candidates() override {
    std::vector<Trial> trials;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      Trial trial;
      trial.id = i;
      trial.label = candidates_[i].label;
      trial.config = {{"fake", candidates_[i].label}};
      trial.strategy = candidates_[i].strategy;
      trial.is_default = i == 0;
      if (candidates_[i].pruned) {
        trial.status = TrialStatus::Pruned;
        trial.message = "planted prune";
      }
      trials.push_back(trial);
    }
    return trials;
  }
  ir::Function schedule(size_t id, const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch) override {
    passes::CompileOptions options;
    options.rows = rows;
    options.cols = cols;
    options.batch = batch;
    options.strategy = candidates_.at(id).strategy;
    return passes::compile_program(program, options);
  }
  std::unique_ptr<BuiltCandidate> build(size_t id, const dsl::Program& program, const ir::Function& schedule) override {
    const FakeCandidate& candidate = candidates_.at(id);
    const bool proxy = program.steps.size() < problem_.program->steps.size();
    int& builds = (proxy ? log.proxy_builds : log.full_builds)[candidate.label];
    ++builds;
    (proxy ? log.proxy_build_batches : log.full_build_batches)[candidate.label].push_back(schedule.batch);
    return std::make_unique<FakeBuilt>(candidate, schedule, proxy, !proxy && candidate.nan_on_second_full_build && builds >= 2, log,
                                       !proxy && candidate.skewed_on_second_full_build && builds >= 2);
  }
  nlohmann::json bench_fields() override { return {{"timer", "fake"}}; }

  FakeLog log;

 private:
  const TuneProblem& problem_;
  std::vector<FakeCandidate> candidates_;
};

class TuningLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    program_ = kernels::load_program_by_name_or_path("jordan_ns5_f32");  // five steps, f32: tight bounds
    problem_.program = &program_;
    problem_.program_name = "jordan_ns5_f32";
    problem_.rows = 32;
    problem_.cols = 96;
    settings_.budget_seconds = 60;
    proxy_.proxy_min_flops = 0;  // rank this small shape by the proxy
  }
  nlohmann::json tune(FakeBackend& backend, const LoopSettings& loop) { return run_tuning_loop(problem_, settings_, loop, backend, "a", "first"); }
  static const nlohmann::json& candidate(const nlohmann::json& entry, const std::string& label) {
    for (const auto& item : entry["candidates"])
      if (item["label"] == label) return item;
    throw std::runtime_error("no candidate " + label);
  }

  dsl::Program program_;
  TuneProblem problem_;
  TuneSettings settings_;
  LoopSettings full_, proxy_;
};

TEST_F(TuningLoop, PlantedWrongResultsAreRejectedAndNeverWin) {
  FakeBackend backend(problem_, {{"a", ir::StrategyKind::Standard, 1.0}, {"fast but wrong", ir::StrategyKind::Standard, 0.1, 0, true},
                                 {"gram", ir::StrategyKind::Gram, 0.9}});
  for (const LoopSettings& loop : {full_, proxy_}) {
    const nlohmann::json entry = tune(backend, loop);
    const auto& wrong = candidate(entry, "fast but wrong");
    EXPECT_EQ(wrong["status"], "wrong_result") << wrong.dump();
    EXPECT_NE(wrong.value("message", "").find("against the f64 reference"), std::string::npos) << wrong.dump();
    EXPECT_FALSE(wrong.contains("p50_ms"));
    EXPECT_EQ(candidate(entry, "a")["status"], "ok");
    EXPECT_EQ(candidate(entry, "gram")["status"], "ok");
    ASSERT_FALSE(entry["winner"].is_null());
    EXPECT_NE(entry["winner"]["label"], "fast but wrong");
  }
  EXPECT_EQ(backend.log.full_timings["fast but wrong"] + backend.log.proxy_timings["fast but wrong"], 0) << "a wrong candidate was timed";
}

// A backend whose candidate "faulty" poisons the device when built (a kernel's illegal address
// on a GPU): from then on every build fails, and unusable_reason says why.
class PoisoningBackend : public FakeBackend {
 public:
  PoisoningBackend(const TuneProblem& problem, std::vector<FakeCandidate> candidates) : FakeBackend(problem, candidates) {
    for (const auto& candidate : candidates) labels_.push_back(candidate.label);
  }
  std::unique_ptr<BuiltCandidate> build(size_t id, const dsl::Program& program, const ir::Function& schedule) override {
    if (labels_.at(id) == "faulty") poisoned_ = true;
    if (poisoned_) throw std::runtime_error("CUDA_ERROR_ILLEGAL_ADDRESS (planted)");
    return FakeBackend::build(id, program, schedule);
  }
  std::string unusable_reason() override { return poisoned_ ? "cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (planted)" : ""; }

 private:
  std::vector<std::string> labels_;
  bool poisoned_ = false;
};

// After a candidate poisons the device, nothing more is judged (every later candidate would fail
// for its reason, and a retime would overwrite the checked timings as failures): the rest are
// "not judged", the faulty one says it poisoned the context, the record says "stopped", and only
// what was checked before can win.
TEST_F(TuningLoop, ACandidateThatPoisonsTheDeviceStopsTheJudging) {
  for (const LoopSettings& loop : {full_, proxy_}) {
    PoisoningBackend backend(problem_, {{"a", ir::StrategyKind::Standard, 1.0}, {"faulty", ir::StrategyKind::Standard, 0.5},
                                        {"fastest", ir::StrategyKind::Standard, 0.1}, {"gram", ir::StrategyKind::Gram, 0.2}});
    const nlohmann::json entry = tune(backend, loop);
    EXPECT_EQ(candidate(entry, "a")["status"], "ok");
    const auto& faulty = candidate(entry, "faulty");
    EXPECT_TRUE(faulty["status"] == "compile_failed" || faulty["status"] == "run_failed") << faulty.dump();  // built in the run phase with the proxy
    EXPECT_NE(faulty.value("message", "").find("it poisoned the CUDA context"), std::string::npos) << faulty.dump();
    for (const char* later : {"fastest", "gram"}) {
      EXPECT_EQ(candidate(entry, later)["status"], "pruned") << later;
      EXPECT_NE(candidate(entry, later).value("message", "").find("not judged: the candidate faulty left the device unusable"), std::string::npos) << later;
    }
    ASSERT_TRUE(entry["bench"].contains("stopped")) << entry["bench"].dump();
    // The winner, if any, is what was checked before the fault (the eligibility rules unchanged).
    if (!entry["winner"].is_null()) {
      EXPECT_EQ(entry["winner"]["label"], "a");
    }
    if (&loop == &full_) {
      EXPECT_FALSE(entry["winner"].is_null());
    }
  }
}

TEST_F(TuningLoop, TheBudgetSkipsTheCandidatesAfterItIsSpentButNeverTheDefault) {
  settings_.budget_seconds = 0.3;
  // The default is always judged, even when it alone spends the budget; the second starts inside
  // the budget; every later one finds it spent. A pruned candidate stays pruned.
  FakeBackend backend(problem_, {{"a", ir::StrategyKind::Standard, 1.0, 0, false, false, 20},
                                 {"b", ir::StrategyKind::Standard, 0.5, 0, false, false, 400},
                                 {"c", ir::StrategyKind::Standard, 0.1},
                                 {"pruned", ir::StrategyKind::Standard, 0.1, 0, false, false, 0, true},
                                 {"d", ir::StrategyKind::Gram, 0.1}});
  const nlohmann::json entry = tune(backend, full_);
  EXPECT_EQ(candidate(entry, "a")["status"], "ok");
  EXPECT_EQ(candidate(entry, "b")["status"], "ok");
  EXPECT_EQ(candidate(entry, "c")["status"], "skipped_budget");
  EXPECT_EQ(candidate(entry, "pruned")["status"], "pruned");
  EXPECT_EQ(candidate(entry, "d")["status"], "skipped_budget");
  EXPECT_EQ(entry["winner"]["label"], "b");
  // With the default alone over budget, only it is judged, and it wins.
  settings_.budget_seconds = 0.01;
  FakeBackend slow(problem_, {{"a", ir::StrategyKind::Standard, 1.0, 0, false, false, 30}, {"b", ir::StrategyKind::Standard, 0.1}});
  const nlohmann::json alone = tune(slow, full_);
  EXPECT_EQ(candidate(alone, "a")["status"], "ok");
  EXPECT_EQ(candidate(alone, "b")["status"], "skipped_budget");
  EXPECT_EQ(alone["winner"]["label"], "a");
}

TEST_F(TuningLoop, FinalistsAreTimedOnTheFullIterationAndOnlyTheyCanWin) {
  // "misleading" looks fastest on the proxy but is the slowest on the full iteration; b and c are
  // slower in full than their estimates, and slower than e's estimate: an estimate must not win.
  // "a", the default, ranks last but is a finalist all the same.
  FakeBackend backend(problem_, {{"a", ir::StrategyKind::Standard, 2.0},
                                 {"misleading", ir::StrategyKind::Standard, 3.0, 0.2},
                                 {"b", ir::StrategyKind::Standard, 1.5, 0.8},
                                 {"c", ir::StrategyKind::Standard, 1.2, 0.9},
                                 {"e", ir::StrategyKind::Standard, 1.0}});
  const nlohmann::json entry = tune(backend, proxy_);
  int finalists = 0;
  for (const auto& item : entry["candidates"]) {
    ASSERT_EQ(item["status"], "ok") << item.dump();
    ASSERT_TRUE(item.contains("proxy")) << "every candidate was ranked by the proxy: " << item.dump();
    EXPECT_EQ(item["proxy"]["steps"], 1);
    EXPECT_DOUBLE_EQ(item["proxy"]["scale"].get<double>(), 5.0);  // five equal steps' products against one's
    const bool finalist = item.value("finalist", false);
    finalists += finalist ? 1 : 0;
    EXPECT_EQ(item["timing"], finalist ? "full" : "proxy");
    const std::string label = item["label"].get<std::string>();
    EXPECT_EQ(backend.log.full_timings[label], finalist ? 1 : 0) << item.dump();
    EXPECT_EQ(backend.log.proxy_timings[label], 1) << item.dump();
  }
  EXPECT_EQ(finalists, 4);
  // The three best estimates: misleading (0.2), b (0.8), c (0.9), and the default; "e" stays an
  // estimate.
  EXPECT_TRUE(candidate(entry, "misleading").value("finalist", false));
  EXPECT_TRUE(candidate(entry, "a").value("finalist", false));
  EXPECT_FALSE(candidate(entry, "e").value("finalist", false));
  // A finalist's p50 is its full-iteration timing, not the estimate.
  const auto& misleading = candidate(entry, "misleading");
  EXPECT_GT(misleading["p50_ms"].get<double>(), 10 * misleading["proxy"]["estimate_p50_ms"].get<double>());
  EXPECT_EQ(entry["winner"]["label"], "c");
  EXPECT_FALSE(entry["default"].contains("timing")) << "the default's median is of the full iteration";
  EXPECT_NE(entry["bench"]["timing"].get<std::string>().find("proxy"), std::string::npos);
}

TEST_F(TuningLoop, AProxyRankingNeverSelectsACandidateThatFailsACheck) {
  // The two best estimates fail: one the reference check (never timed), one its finalist run on
  // the full iteration (a NaN): neither wins, and the next in rank takes the finalist's place.
  FakeBackend backend(problem_, {{"a", ir::StrategyKind::Standard, 1.0},
                                 {"wrong", ir::StrategyKind::Standard, 0.1, 0, true},
                                 {"nan at full", ir::StrategyKind::Standard, 0.2, 0, false, true},
                                 {"b", ir::StrategyKind::Standard, 0.8},
                                 {"c", ir::StrategyKind::Standard, 0.9}});
  LoopSettings loop = proxy_;
  loop.retime_top = 2;
  const nlohmann::json entry = tune(backend, loop);
  EXPECT_EQ(candidate(entry, "wrong")["status"], "wrong_result");
  EXPECT_FALSE(candidate(entry, "wrong").value("finalist", false));
  const auto& nan = candidate(entry, "nan at full");
  EXPECT_EQ(nan["status"], "wrong_result") << nan.dump();
  EXPECT_NE(nan.value("message", "").find("full iteration"), std::string::npos) << nan.dump();
  EXPECT_TRUE(candidate(entry, "b").value("finalist", false));
  EXPECT_TRUE(candidate(entry, "c").value("finalist", false));
  EXPECT_TRUE(candidate(entry, "a").value("finalist", false));  // the default, always
  EXPECT_EQ(entry["winner"]["label"], "b");
}

// One standard step's dense FLOPs (the measure proxy_shape bounds).
double step_flops(int64_t rows, int64_t cols, int64_t batch) {
  const double m = static_cast<double>(std::min(rows, cols)), n = static_cast<double>(std::max(rows, cols));
  return (4 * m * m * n + 2 * m * m * m) * static_cast<double>(batch);
}

TEST(ProxyShape, AnExpensiveStepIsScaledDownKeepingTheAspectRatio) {
  // Cheap enough: the problem's own shape.
  const ProxyShape same = proxy_shape(1024, 4096, 1, 4e10);
  EXPECT_EQ(same.rows, 1024);
  EXPECT_EQ(same.cols, 4096);
  EXPECT_EQ(same.batch, 1);
  // One step of 4096x14336 is 1.1e12: both sides shrink by one factor, in whole microtiles, to
  // about the bound (rounding to 32 moves the cost by a few percent).
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{4096, 14336}, {14336, 4096}, {4096, 4096}, {8192, 28672}}) {
    const ProxyShape shape = proxy_shape(rows, cols, 1, 4e10);
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + " -> " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols));
    EXPECT_EQ(shape.rows % 32, 0);
    EXPECT_EQ(shape.cols % 32, 0);
    EXPECT_EQ(shape.batch, 1);
    EXPECT_LT(shape.rows, rows);
    EXPECT_NEAR(static_cast<double>(shape.cols) / static_cast<double>(shape.rows), static_cast<double>(cols) / static_cast<double>(rows),
                0.05 * static_cast<double>(cols) / static_cast<double>(rows));
    EXPECT_NEAR(step_flops(shape.rows, shape.cols, 1), 4e10, 0.1 * 4e10);
  }
  // A batch loses matrices first, down to kProxyMinBatch; then the sides, not below kProxyMinSide
  // (a side already smaller stays).
  const ProxyShape fewer = proxy_shape(128, 512, 64, step_flops(128, 512, 8));
  EXPECT_EQ(fewer.batch, 8);
  EXPECT_EQ(fewer.rows, 128);
  EXPECT_EQ(fewer.cols, 512);
  const ProxyShape tiny = proxy_shape(128, 512, 64, 1);
  EXPECT_EQ(tiny.batch, kProxyMinBatch);
  EXPECT_EQ(tiny.rows, 128);
  EXPECT_EQ(tiny.cols, kProxyMinSide);
}

TEST_F(TuningLoop, AnExpensiveShapeIsRankedOnTheProxyShapeAndOnlyFinalistsRunTheFullShape) {
  // A batch of 16 whose step is over the (lowered) bound: the proxy runs 4 matrices, its time
  // scaled by 5 steps x 16/4 matrices; the finalists run all 16 on the full iteration, and a
  // candidate whose full shape writes a NaN (an edge the proxy shape does not have) cannot win.
  problem_.batch = 16;
  LoopSettings loop = proxy_;
  loop.proxy_step_max_flops = step_flops(problem_.rows, problem_.cols, 4);
  loop.retime_top = 2;
  FakeBackend backend(problem_, {{"a", ir::StrategyKind::Standard, 1.0},
                                 {"nan at full", ir::StrategyKind::Standard, 0.2, 0, false, true},
                                 {"b", ir::StrategyKind::Standard, 0.5},
                                 {"c", ir::StrategyKind::Standard, 0.8}});
  // Only the full shape's second build writes a NaN in this fake: so that it is caught at the
  // finalists' run, every candidate must be built at full size once (its check) before it.
  const nlohmann::json entry = tune(backend, loop);
  EXPECT_EQ(entry["bench"]["proxy_shape"]["batch"], 4);
  EXPECT_EQ(entry["bench"]["proxy_shape"]["rows"], problem_.rows);
  for (const std::string label : {"a", "nan at full", "b", "c"}) {
    SCOPED_TRACE(label);
    EXPECT_EQ(backend.log.proxy_build_batches[label], std::vector<int64_t>{4});
    for (int64_t batch : backend.log.full_build_batches[label]) EXPECT_EQ(batch, 16);
    EXPECT_DOUBLE_EQ(candidate(entry, label)["proxy"]["scale"].get<double>(), 20.0);
  }
  EXPECT_EQ(candidate(entry, "nan at full")["status"], "wrong_result");
  EXPECT_TRUE(candidate(entry, "b").value("finalist", false));
  EXPECT_TRUE(candidate(entry, "c").value("finalist", false));
  EXPECT_TRUE(candidate(entry, "a").value("finalist", false));
  EXPECT_EQ(entry["winner"]["label"], "b");
}

TEST_F(TuningLoop, AFinalistWrongOnlyAtTheFullShapeIsCaughtByTheFullReference) {
  // "skewed" passes its check (its first full build) and ranks first, but its finalist run writes
  // one wrong, finite element: the finalist's comparison with the full shape's f64 reference
  // rejects it, and it never wins; the next in rank takes its place.
  FakeCandidate skewed{"skewed", ir::StrategyKind::Standard, 0.1};
  skewed.skewed_on_second_full_build = true;
  FakeBackend backend(problem_, {{"a", ir::StrategyKind::Standard, 1.0}, skewed, {"b", ir::StrategyKind::Standard, 0.5}});
  LoopSettings loop = proxy_;
  loop.retime_top = 1;
  const nlohmann::json entry = tune(backend, loop);
  const auto& wrong = candidate(entry, "skewed");
  EXPECT_EQ(wrong["status"], "wrong_result") << wrong.dump();
  EXPECT_NE(wrong.value("message", "").find("full iteration at the full shape"), std::string::npos) << wrong.dump();
  EXPECT_TRUE(candidate(entry, "b").value("finalist", false));
  EXPECT_EQ(entry["winner"]["label"], "b");
}

TEST_F(TuningLoop, TheProxyIsTheFirstStepsAndSmallShapesAreTimedInFull) {
  ASSERT_EQ(program_.gram_restarts, std::vector<int>{2});
  const dsl::Program one = first_steps(program_, 1);
  EXPECT_EQ(one.steps.size(), 1u);
  EXPECT_TRUE(one.gram_restarts.empty()) << "a restart beyond the reduced steps would not compile";
  const dsl::Program three = first_steps(program_, 3);
  EXPECT_EQ(three.steps.size(), 3u);
  EXPECT_EQ(three.gram_restarts, std::vector<int>{2});
  EXPECT_EQ(three.steps[2].a, program_.steps[2].a);
  // At the default threshold this shape is far too cheap for a proxy: every candidate full.
  FakeBackend backend(problem_, {{"a", ir::StrategyKind::Standard, 1.0}, {"b", ir::StrategyKind::Gram, 0.5}});
  const nlohmann::json entry = tune(backend, full_);
  for (const auto& item : entry["candidates"]) EXPECT_FALSE(item.contains("proxy")) << item.dump();
  EXPECT_EQ(backend.log.proxy_builds.size(), 0u);
  EXPECT_EQ(entry["bench"]["timing"], "full iteration");
}

TEST(TuningOptions, NamesRoundTripAndUnknownOnesAreRefused) {
  for (TrialStatus status : {TrialStatus::Ok, TrialStatus::Pruned, TrialStatus::WrongResult, TrialStatus::CompileFailed, TrialStatus::RunFailed,
                             TrialStatus::SkippedBudget})
    EXPECT_EQ(parse_trial_status(to_string(status)), status);
  EXPECT_EQ(std::string(to_string(TrialStatus::SkippedBudget)), "skipped_budget");
  EXPECT_FALSE(parse_trial_status("fine").has_value());
  EXPECT_EQ(parse_tune_backend("cuda"), TuneBackend::Cuda);
  EXPECT_FALSE(parse_tune_backend("gpu").has_value());
  EXPECT_EQ(parse_product_engine("onednn"), cpu::ProductEngine::OneDnn);
  EXPECT_FALSE(parse_product_engine("mkl").has_value());
  EXPECT_THROW(parse_strategy_or_throw("newton", "x"), std::invalid_argument);
}

// An entry as the tuner wrote it before the shared loop (string fields, no proxy fields) is read
// by the runtime's lookup with the same meaning.
TEST(TuningOptions, ARecordOfTheEarlierFormatStillLoads) {
  const auto directory = std::filesystem::temp_directory_path() / ("orthojit-loop-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::string path = (directory / "old.json").string();
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const ProblemKey key = problem_key(program, 256, 1024, 1, std::nullopt);
  const nlohmann::json config = {{"engine", "openblas"}, {"strategy", "gram"}, {"triangular", true}};
  const nlohmann::json entry = {{"program", "jordan_ns5"},
                                {"candidates", {{{"label", "openblas gram syrk"}, {"config", config}, {"status", "ok"}, {"p50_ms", 3.5}},
                                                {{"label", "jit standard tri 144/384/1024"}, {"status", "skipped_budget"}}}},
                                {"winner", {{"label", "openblas gram syrk"}, {"config", config}, {"p50_ms", 3.5}}}};
  merge_into_tuning_file(path, cpu_fingerprint(), {{key.key, entry}}, nullptr);
  ::setenv("ORTHOJIT_TUNING_FILE", path.c_str(), 1);
  const TunedChoice choice = lookup_tuned(program, 256, 1024, 1, std::nullopt);
  ::unsetenv("ORTHOJIT_TUNING_FILE");
  ASSERT_TRUE(choice.winner.has_value()) << choice.reason;
  EXPECT_EQ(choice.winner->engine, cpu::ProductEngine::OpenBlas);
  EXPECT_EQ(choice.winner->strategy, ir::StrategyKind::Gram);
  EXPECT_EQ(choice.winner->to_json(), config) << "written back with the same strings";
  EXPECT_EQ(parse_trial_status(entry["candidates"][1]["status"].get<std::string>()), TrialStatus::SkippedBudget);
  // A program compiled under that record runs its products in OpenBLAS, and says so (bench's
  // ceiling and words follow it; it once named the bf16 kernel the path would have used).
  if (!cpu::cpu_backend_unavailable_reason().empty() || !cpu::openblas_unavailable_reason().empty()) {
    std::filesystem::remove_all(directory);
    return;  // a build without the CPU backend or OpenBLAS runs no such winner
  }
  ::setenv("ORTHOJIT_TUNING_FILE", path.c_str(), 1);
  runtime::OrthogonalizeOptions options;
  options.backend = "cpu";
  const auto compiled = runtime::compile_orthogonalizer(program, 1, 256, 1024, options);
  // A requested strategy (a Muon preset pins one) takes the record's kernels when its winner has
  // that strategy, and says why not when it does not (records were not consulted at all).
  options.strategy = "gram";
  const auto requested_gram = runtime::compile_orthogonalizer(program, 1, 256, 1024, options);
  options.strategy = "standard";
  const auto requested_standard = runtime::compile_orthogonalizer(program, 1, 256, 1024, options);
  ::unsetenv("ORTHOJIT_TUNING_FILE");
  EXPECT_EQ(compiled->cpu_engine(), "openblas");
  EXPECT_EQ(requested_gram->cpu_engine(), "openblas") << requested_gram->strategy_reason();
  EXPECT_NE(requested_gram->strategy_reason().find("gram: requested; kernels"), std::string::npos) << requested_gram->strategy_reason();
  EXPECT_NE(requested_standard->cpu_engine(), "openblas");
  EXPECT_NE(requested_standard->strategy_reason().find("winner runs gram: not used"), std::string::npos) << requested_standard->strategy_reason();
  std::filesystem::remove_all(directory);
}

// The optimizers batch a model's equal shapes (one compiled Muon step per shape), while `tune
// --model` records each shape once: a batch without its own record takes its matrix's, and says
// so; a record of the batch itself comes first; another shape's record is never taken.
TEST(TuningOptions, ABatchWithoutItsOwnRecordTakesItsMatrixsRecord) {
  const auto directory = std::filesystem::temp_directory_path() / ("orthojit-batch-record-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const std::string path = (directory / "records.json").string();
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  auto entry = [](const char* strategy, double ms) {
    const nlohmann::json config = {{"engine", "jit"}, {"strategy", strategy}, {"triangular", true}, {"blocking", {96, 256, 512}}};
    return nlohmann::json{{"program", "jordan_ns5"}, {"candidates", nlohmann::json::array()},
                          {"winner", {{"label", std::string("jit ") + strategy}, {"config", config}, {"p50_ms", ms}}}};
  };
  merge_into_tuning_file(path, cpu_fingerprint(),
                         {{problem_key(program, 64, 256, 1, std::nullopt).key, entry("gram", 1.0)},
                          {problem_key(program, 64, 256, 4, std::nullopt).key, entry("standard", 3.0)}},
                         nullptr);
  ::setenv("ORTHOJIT_TUNING_FILE", path.c_str(), 1);
  const TunedChoice batch_of_eight = lookup_tuned(program, 64, 256, 8, std::nullopt);
  const TunedChoice batch_of_four = lookup_tuned(program, 64, 256, 4, std::nullopt);
  const TunedChoice transposed = lookup_tuned(program, 256, 64, 8, std::nullopt);  // oriented: the same kernels
  const TunedChoice other_shape = lookup_tuned(program, 64, 512, 8, std::nullopt);
  ::unsetenv("ORTHOJIT_TUNING_FILE");
  ASSERT_TRUE(batch_of_eight.winner.has_value()) << batch_of_eight.reason;
  EXPECT_EQ(batch_of_eight.winner->strategy, ir::StrategyKind::Gram);
  EXPECT_EQ(batch_of_eight.winner->mc, 96);
  EXPECT_NE(batch_of_eight.reason.find("the record of one matrix, for each of the batch's 8"), std::string::npos) << batch_of_eight.reason;
  ASSERT_TRUE(batch_of_four.winner.has_value()) << batch_of_four.reason;
  EXPECT_EQ(batch_of_four.winner->strategy, ir::StrategyKind::Standard);
  EXPECT_EQ(batch_of_four.reason.find("one matrix"), std::string::npos) << batch_of_four.reason;
  ASSERT_TRUE(transposed.winner.has_value()) << transposed.reason;
  EXPECT_EQ(transposed.winner->strategy, ir::StrategyKind::Gram);
  EXPECT_FALSE(other_shape.winner.has_value());
  EXPECT_EQ(other_shape.reason, "no tuning record for this shape");
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace orthojit::autotune
