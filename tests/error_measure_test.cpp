// The tuner's reference check (autotune/reference_check.h, autotune/error_measure.h): correct
// outputs of real shapes pass, and local corruption that a relative Frobenius bound lets through
// does not: one zeroed 16x16 tile, one wrong matrix of a batch (not the first), a transposed
// output; and through the tuner's own path, a candidate whose output is wrong only on a later
// matrix of the batch is recorded wrong_result and never wins.
//
// DISABLED_MeasureCorrectOutputs and DISABLED_MeasureEmulatedCudaOutputs print the measure on
// correct outputs across the shipped programs, storage types, strategies, engines and the CUDA
// kernels run on the host emulator (the numbers quoted in autotune/error_measure.cpp):
//   build/bin/error_measure_test --gtest_also_run_disabled_tests --gtest_filter='*Measure*'
// (the CPU one takes about 20 minutes on 2 cores, the emulated one hours; see measured_shapes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "autotune/error_measure.h"
#include "autotune/reference_check.h"
#include "autotune/search_space.h"
#include "autotune/tuner.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"
#include "reference/random_matrix.h"
#if ORTHOJIT_MEASURE_CUDA_EMULATION
#include <unistd.h>

#include <filesystem>

#include "cuda/cuda_backend.h"
#include "cuda_host_emulator.h"
#endif

namespace orthojit::autotune {
namespace {

struct CandidateRun {
  ir::Function function;
  std::vector<float> input, output;
};

// The candidate as the tuner builds and runs it, on the tuner's kind of input.
CandidateRun run_candidate(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, std::optional<ScalarType> precision,
                  const Candidate& candidate, uint64_t seed) {
  TuneProblem problem;
  problem.program = &program;
  problem.rows = rows;
  problem.cols = cols;
  problem.batch = batch;
  problem.precision = precision;
  CandidateRun run;
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  options.precision = precision;
  options.strategy = candidate.strategy;
  options.triangular_products = candidate.triangular;
  run.function = passes::compile_program(program, options);
  const auto values = reference::gaussian_values(rows * cols * batch, seed);
  run.input.assign(values.begin(), values.end());
  run.output.assign(run.input.size(), std::nanf(""));
  build_candidate(problem, candidate, 0)->run(run.input.data(), run.output.data());
  return run;
}

Candidate with_strategy(const char* strategy) {
  Candidate candidate;
  candidate.strategy = *ir::parse_strategy(strategy);
  return candidate;
}

// A real shape (a Llama-style 512x2048 block, bf16) in a batch of three, the default candidate.
class PlantedErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    program_ = new dsl::Program(kernels::load_program_by_name_or_path("jordan_ns5"));
    wide_ = new CandidateRun(run_candidate(*program_, 512, 2048, 3, std::nullopt, with_strategy("standard"), 11));
    wide_reference_ = new Reference(reference_of(wide_->function, wide_->input));
    square_ = new CandidateRun(run_candidate(*program_, 256, 256, 2, std::nullopt, with_strategy("standard"), 12));
    square_reference_ = new Reference(reference_of(square_->function, square_->input));
  }
  static void TearDownTestSuite() {
    delete square_reference_;
    delete square_;
    delete wide_reference_;
    delete wide_;
    delete program_;
  }
  static inline dsl::Program* program_ = nullptr;
  static inline CandidateRun *wide_ = nullptr, *square_ = nullptr;
  static inline Reference *wide_reference_ = nullptr, *square_reference_ = nullptr;
};

TEST_F(PlantedErrors, TheCorrectOutputIsAcceptedOnEveryMatrix) {
  ASSERT_EQ(wide_reference_->matrices, (std::vector<int64_t>{0, 1, 2})) << "a batch this small is checked whole";
  const CheckResult wide = compare(wide_->output, *wide_reference_);
  EXPECT_TRUE(wide.ok) << wide.message;
  const CheckResult square = compare(square_->output, *square_reference_);
  EXPECT_TRUE(square.ok) << square.message;
  // Well inside the bound, which stays below what a zeroed tile is (>= 1).
  EXPECT_LT(wide.error, wide_reference_->bounds.tile / 2);
  EXPECT_LE(wide_reference_->bounds.tile, 0.75);
  std::printf("correct 512x2048x3 bf16: tile %.3g (bound %.3g), frobenius %.3g (bound %.3g)\n", wide.measure.tile, wide_reference_->bounds.tile,
              wide.measure.frobenius, wide_reference_->bounds.frobenius);
}

TEST_F(PlantedErrors, OneZeroedTileIsRejected) {
  std::vector<float> output = wide_->output;
  // Matrix 0, the tile at rows 240-255, columns 1024-1039.
  for (int64_t i = 240; i < 256; ++i)
    for (int64_t j = 1024; j < 1040; ++j) output[static_cast<size_t>(i * 2048 + j)] = 0;
  const CheckResult check = compare(output, *wide_reference_);
  EXPECT_FALSE(check.ok);
  EXPECT_LT(check.measure.frobenius, 3e-2) << "the old Frobenius bound alone would have let it through";
  EXPECT_GE(check.measure.tile, 1.0) << "a zeroed tile is at least its own RMS off";
  std::printf("one zeroed tile of 512x2048x3 bf16: tile %.3g (bound %.3g), frobenius %.3g (bound %.3g)\n", check.measure.tile, wide_reference_->bounds.tile,
              check.measure.frobenius, wide_reference_->bounds.frobenius);
  EXPECT_EQ(check.measure.tile_matrix, 0);
  EXPECT_EQ(check.measure.tile_row, 240);
  EXPECT_EQ(check.measure.tile_col, 1024);
  EXPECT_NE(check.message.find("tile error"), std::string::npos) << check.message;
  EXPECT_NE(check.message.find("rows 240-255, cols 1024-1039"), std::string::npos) << check.message;
}

TEST_F(PlantedErrors, OneWrongMatrixOfTheBatchIsRejected) {
  // Matrix 1 (not the first) replaced by matrix 0's output: a well-formed orthogonal-looking
  // result for the wrong input, as a batch-offset slip gives.
  std::vector<float> output = wide_->output;
  const size_t per_matrix = 512 * 2048;
  std::copy(output.begin(), output.begin() + per_matrix, output.begin() + per_matrix);
  const CheckResult check = compare(output, *wide_reference_);
  EXPECT_FALSE(check.ok);
  EXPECT_EQ(check.measure.tile_matrix, 1);
  EXPECT_NE(check.message.find("matrix 1"), std::string::npos) << check.message;
  // And the last one, slightly off (scaled by 1.05: every element a little): the per-matrix
  // Frobenius bound, not only the tile one, sees a diffuse error.
  output = wide_->output;
  for (size_t e = 2 * per_matrix; e < 3 * per_matrix; ++e) output[e] *= 1.05f;
  const CheckResult scaled = compare(output, *wide_reference_);
  EXPECT_FALSE(scaled.ok);
  EXPECT_EQ(scaled.measure.frobenius_matrix, 2);
  EXPECT_LT(scaled.measure.tile, wide_reference_->bounds.tile) << "the Frobenius bound, not the tile one, should be what catches this";
  std::printf("last matrix scaled by 1.05: tile %.3g (bound %.3g), frobenius %.3g (bound %.3g)\n", scaled.measure.tile, wide_reference_->bounds.tile,
              scaled.measure.frobenius, wide_reference_->bounds.frobenius);
  // An unwritten element anywhere is caught too.
  output = wide_->output;
  output[2 * per_matrix + 12345] = std::nanf("");
  EXPECT_FALSE(compare(output, *wide_reference_).ok);
}

TEST_F(PlantedErrors, ATransposedOutputIsRejected) {
  std::vector<float> output = square_->output;
  for (int64_t z = 0; z < 2; ++z)
    for (int64_t i = 0; i < 256; ++i)
      for (int64_t j = 0; j < 256; ++j) output[static_cast<size_t>(z * 65536 + i * 256 + j)] = square_->output[static_cast<size_t>(z * 65536 + j * 256 + i)];
  const CheckResult check = compare(output, *square_reference_);
  EXPECT_FALSE(check.ok);
  EXPECT_GT(check.measure.tile, 1.0);
  std::printf("transposed 256x256x2 bf16: tile %.3g (bound %.3g), frobenius %.3g\n", check.measure.tile, square_reference_->bounds.tile, check.measure.frobenius);
  // Only the second matrix transposed: still rejected, and found there.
  output = square_->output;
  for (int64_t i = 0; i < 256; ++i)
    for (int64_t j = 0; j < 256; ++j) output[static_cast<size_t>(65536 + i * 256 + j)] = square_->output[static_cast<size_t>(65536 + j * 256 + i)];
  const CheckResult second = compare(output, *square_reference_);
  EXPECT_FALSE(second.ok);
  EXPECT_EQ(second.measure.tile_matrix, 1);
}

// A reference with a NaN or an infinity (an iteration that overflows in its storage type) judges
// nothing: any comparison with it is false, so before this check a garbage candidate measured
// error 0 and passed. And a non-finite candidate says how many values, how many never written (the
// all-ones poison) and where the first is.
TEST(ErrorMeasure, ANonFiniteReferenceJudgesNothingAndNonFiniteOutputsAreLocated) {
  const int64_t rows = 20, cols = 40;
  const std::vector<double> values = reference::gaussian_values(rows * cols * 2, 31);
  std::vector<double> reference(values.begin(), values.end());
  std::vector<float> garbage(reference.size(), 123.0f);
  const ErrorBounds bounds = error_bounds(ScalarType::BF16, ScalarType::F32, cols);
  reference[rows * cols + 7] = std::numeric_limits<double>::quiet_NaN();  // matrix 1
  const ErrorMeasure against_nan = measure_error(garbage.data(), reference.data(), rows, cols, 2);
  EXPECT_FALSE(within(against_nan, bounds));
  EXPECT_NE(describe_violation(against_nan, bounds, rows, cols).find("the f64 reference is not finite in matrix 1"), std::string::npos)
      << describe_violation(against_nan, bounds, rows, cols);
  reference[rows * cols + 7] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(within(measure_error(garbage.data(), reference.data(), rows, cols, 2), bounds));

  reference.assign(values.begin(), values.end());
  std::vector<float> output(reference.begin(), reference.end());
  uint32_t poison = 0xffffffffu;
  std::memcpy(&output[rows * cols + 3 * cols + 5], &poison, 4);  // matrix 1, (3, 5): never written
  std::memcpy(&output[rows * cols + 9 * cols + 1], &poison, 4);
  output[rows * cols + 12 * cols + 2] = std::numeric_limits<float>::infinity();  // an overflow
  const ErrorMeasure located = measure_error(output.data(), reference.data(), rows, cols, 2);
  EXPECT_FALSE(within(located, bounds));
  EXPECT_EQ(describe_violation(located, bounds, rows, cols),
            "non-finite output in matrix 1: 3 of its 800 values (2 still the poison: never written), the first at (3, 5)");
}

TEST(CheckedMatrices, SmallBatchesWholeLargeOnesSampledWithBothEnds) {
  EXPECT_EQ(checked_matrices(1, 1e9), (std::vector<int64_t>{0}));
  EXPECT_EQ(checked_matrices(36, 6.6e7).size(), 36u);  // 36 heads of 64x768: all
  // 64 experts of 1408x2048 (1.1e11 FLOPs each): the first and the last.
  EXPECT_EQ(checked_matrices(64, 1.09e11), (std::vector<int64_t>{0, 63}));
  // Budget for five: evenly spaced, both ends included, ascending, no repeats.
  const std::vector<int64_t> five = checked_matrices(100, kFullCheckFlops / 5);
  EXPECT_EQ(five, (std::vector<int64_t>{0, 25, 50, 74, 99}));
  // Above the full-check budget per matrix (the reduced-shape path decides then): still two.
  EXPECT_EQ(checked_matrices(8, 2 * kFullCheckFlops), (std::vector<int64_t>{0, 7}));
}

// Through the tuner: the default candidate (first in order, the tie winner) is right on matrix 0
// and wrong on matrix 2 of 3 (one zeroed tile); it must be recorded wrong_result and not win.
TEST(TunerBatchCheck, ACandidateWrongOnlyOnALaterMatrixNeverWins) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  TuneProblem problem;
  problem.program = &program;
  problem.program_name = "jordan_ns5";
  problem.rows = 64;
  problem.cols = 256;
  problem.batch = 3;
  TuneSettings settings;
  settings.budget_seconds = 2;
  const Candidate spoiled = default_candidate(program, problem.rows, problem.cols, std::nullopt, nullptr);
  settings.tamper_output = [&](const Trial& trial, float* output, size_t count, bool full_shape) {
    ASSERT_EQ(count, static_cast<size_t>(3 * 64 * 256));
    if (full_shape || !(Candidate::from_json(trial.config) == spoiled)) return;
    for (int64_t i = 16; i < 32; ++i)
      for (int64_t j = 48; j < 64; ++j) output[2 * 64 * 256 + i * 256 + j] = 0;
  };
  const nlohmann::json entry = tune_shape(problem, settings);
  bool found = false;
  int ok = 0;
  for (const auto& candidate : entry["candidates"]) {
    if (Candidate::from_json(candidate["config"]) == spoiled) {
      found = true;
      EXPECT_EQ(candidate["status"], "wrong_result") << candidate.dump();
      EXPECT_NE(candidate.value("message", "").find("matrix 2"), std::string::npos) << candidate.dump();
    } else if (candidate["status"] == "ok") {
      ++ok;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_GE(ok, 1);
  ASSERT_FALSE(entry["winner"].is_null());
  EXPECT_NE(Candidate::from_json(entry["winner"]["config"]), spoiled);
  EXPECT_TRUE(entry["bench"]["tolerance"].contains("tile")) << entry["bench"].dump();
}

// What the measurements below cover can be narrowed from the environment, to rerun a part:
// ORTHOJIT_MEASURE_PROGRAMS (comma-separated names), ORTHOJIT_MEASURE_PRECISION (bf16, f16 or f32),
// ORTHOJIT_MEASURE_SHAPES (comma-separated RxC or RxCxB). By default every shipped program but
// the *_f32 ones, which with the precision set here are their base programs exactly.
struct MeasuredShape {
  int64_t rows, cols, batch;
};

std::vector<MeasuredShape> measured_shapes(std::vector<MeasuredShape> defaults) {
  const char* text = std::getenv("ORTHOJIT_MEASURE_SHAPES");
  if (!text) return defaults;
  std::vector<MeasuredShape> shapes;
  std::string list = std::string(text) + ",";
  for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
    MeasuredShape shape{0, 0, 1};
    if (std::sscanf(list.substr(at, comma - at).c_str(), "%ldx%ldx%ld", &shape.rows, &shape.cols, &shape.batch) >= 2) shapes.push_back(shape);
  }
  return shapes;
}

bool measured_program(const std::string& name) {
  if (const char* only = std::getenv("ORTHOJIT_MEASURE_PROGRAMS")) return ("," + std::string(only) + ",").find("," + name + ",") != std::string::npos;
  return !name.ends_with("_f32");
}

bool measured_precision(ScalarType type) {
  const char* only = std::getenv("ORTHOJIT_MEASURE_PRECISION");
  return !only || std::string(only) == to_string(type);
}

// The measure on correct outputs: every shipped program x storage (bf16, f16, f32) x strategy x
// the shapes the tests and the tuner use (and a real 512x2048) x the stage-one engines (jit
// triangular, jit dense, OpenBLAS), two seeds each; the largest values per storage and strategy.
TEST(ErrorMeasure, DISABLED_MeasureCorrectOutputs) {
  const std::vector<MeasuredShape> shapes = measured_shapes({{48, 200, 1},   {40, 130, 3},  {96, 320, 3},  {256, 1024, 1}, {300, 200, 2},
                                                             {192, 192, 1},  {192, 768, 1}, {512, 2048, 1}, {1, 1, 1},     {7, 300, 1}});
  struct Worst {
    double tile = 0, frobenius = 0;
    std::string tile_case, frobenius_case;
    ErrorBounds bounds;
    int cases = 0;
  };
  std::map<std::string, Worst> worst;
  const std::vector<Candidate> candidates = stage_one_candidates(search_space("cpu"));
  for (const auto& shipped : kernels::shipped_programs()) {
    if (!measured_program(std::string(shipped.name))) continue;
    const dsl::Program program = kernels::load_program_by_name_or_path(std::string(shipped.name));
    for (ScalarType precision : {ScalarType::BF16, ScalarType::F16, ScalarType::F32})
      for (const MeasuredShape& shape : shapes)
        for (const char* strategy : {"standard", "gram"}) {
          if (!measured_precision(precision)) continue;
          std::optional<Reference> reference;
          for (uint64_t seed : {20261201ull, 7ull}) {
            reference.reset();
            for (const Candidate& candidate : candidates) {
              if (candidate.strategy != *ir::parse_strategy(strategy) ||
                  (candidate.engine == cpu::ProductEngine::OpenBlas && !candidate.triangular && candidate.strategy == ir::StrategyKind::Gram))
                continue;
              if (candidate.cpu_isa() && !cpu::host_supports(*candidate.cpu_isa())) continue;  // e.g. the amx kernel without AMX
              CandidateRun run;
              try {
                run = run_candidate(program, shape.rows, shape.cols, shape.batch, precision, candidate, seed);
              } catch (const std::exception&) {
                break;  // gram impossible for this program
              }
              if (!reference) reference = reference_of(run.function, run.input);
              const CheckResult check = compare(run.output, *reference);
              const std::string name = std::string(shipped.name) + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) + "x" +
                                       std::to_string(shape.batch) + " " + candidate.label() + " seed " + std::to_string(seed);
              Worst& w = worst[std::string(to_string(precision)) + " " + strategy];
              ++w.cases;
              w.bounds = reference->bounds;
              if (check.measure.tile > w.tile) w.tile = check.measure.tile, w.tile_case = name;
              if (check.measure.frobenius > w.frobenius) w.frobenius = check.measure.frobenius, w.frobenius_case = name;
              const ErrorBounds bounds = reference->bounds;
              EXPECT_TRUE(check.ok) << name << ": " << check.message;
              std::printf("%-5s %-8s %-72s tile %.3e (bound %.2e)  frobenius %.3e (bound %.1e)\n", std::string(to_string(precision)).c_str(), strategy,
                          name.c_str(), check.measure.tile, bounds.tile, check.measure.frobenius, bounds.frobenius);
            }
          }
        }
  }
  std::printf("\nlargest values of the measure on correct outputs:\n");
  for (const auto& [key, w] : worst)
    std::printf("%-14s %4d cases  tile %.3e (%s; bound %.2e)  frobenius %.3e (%s; bound %.1e)\n", key.c_str(), w.cases, w.tile, w.tile_case.c_str(),
                w.bounds.tile, w.frobenius, w.frobenius_case.c_str(), w.bounds.frobenius);
}

#if ORTHOJIT_MEASURE_CUDA_EMULATION
// The same for the CUDA backend's generated kernels (default tiles) run on the host emulator
// (tests/cuda_host_emulator.h: f32 sums in MMA order, conversions rounding as PTX does), on the
// shapes of tests/cuda_device_test.cpp that the emulator runs in reasonable time. Slow: one
// host compile per case and one std::thread per CUDA thread.
TEST(ErrorMeasure, DISABLED_MeasureEmulatedCudaOutputs) {
  if (!cuda::emulation::host_compiler_available()) GTEST_SKIP() << "no host c++";
  const std::vector<MeasuredShape> shapes = measured_shapes({{96, 320, 3}, {300, 200, 2}, {192, 192, 1}});
  for (const auto& shipped : kernels::shipped_programs()) {
    if (!measured_program(std::string(shipped.name))) continue;
    const dsl::Program program = kernels::load_program_by_name_or_path(std::string(shipped.name));
    for (ScalarType precision : {ScalarType::BF16, ScalarType::F16})
      for (const MeasuredShape& shape : shapes)
        for (ir::StrategyKind strategy : {ir::StrategyKind::Standard, ir::StrategyKind::Gram}) {
          if (!measured_precision(precision)) continue;
          passes::CompileOptions options;
          options.rows = shape.rows;
          options.cols = shape.cols;
          options.batch = shape.batch;
          options.precision = precision;
          options.strategy = strategy;
          ir::Function function;
          try {
            function = passes::compile_program(program, options);
          } catch (const std::exception&) {
            continue;
          }
          const std::string name = std::string(shipped.name) + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) + "x" +
                                   std::to_string(shape.batch) + " " + ir::to_string(strategy) + " generated";
          std::string directory = "orthojit_measure_" + std::to_string(::getpid()) + "_" + name;
          for (char& ch : directory)
            if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
          cuda::emulation::HostEmulator emulator(cuda::generate_variant(function, {}, 227 * 1024), std::filesystem::path(::testing::TempDir()) / directory);
          const auto values = reference::gaussian_values(shape.rows * shape.cols * shape.batch, 20261201);
          const std::vector<float> input(values.begin(), values.end());
          const auto result = emulator.run(input);
          const std::vector<double> expected = reference::interpret(function, std::vector<double>(input.begin(), input.end()));
          const ErrorMeasure measure = measure_error(result.output.data(), expected.data(), shape.rows, shape.cols, shape.batch);
          const ErrorBounds bounds = error_bounds(function);
          EXPECT_TRUE(within(measure, bounds)) << name << ": " << describe_violation(measure, bounds, shape.rows, shape.cols);
          std::printf("%-5s %-8s %-72s tile %.3e (bound %.2e)  frobenius %.3e (bound %.1e)", std::string(to_string(precision)).c_str(),
                      ir::to_string(strategy), (name + " seed 20261201").c_str(), measure.tile, bounds.tile, measure.frobenius, bounds.frobenius);
          for (int64_t z = 0; z < shape.batch && shape.batch > 1; ++z) {
            const int64_t per_matrix = shape.rows * shape.cols;
            const ErrorMeasure one = measure_error(result.output.data() + z * per_matrix, expected.data() + z * per_matrix, shape.rows, shape.cols, 1);
            std::printf("  [%lld: %.2e %.2e]", static_cast<long long>(z), one.tile, one.frobenius);
          }
          std::printf("\n");
          std::fflush(stdout);
        }
  }
}
#endif

}  // namespace
}  // namespace orthojit::autotune
