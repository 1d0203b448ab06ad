// The Gram restart search (autotune/gram_restart_search.h): its scalar simulation against the
// same map written out here in f64; f16 Gram on ill-conditioned inputs with the chosen restarts
// against the standard strategy and a fixed [2]; the tuning record's restarts written, read back
// and applied by the runtime; the request's errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "autotune/device_fingerprint.h"
#include "autotune/gram_restart_search.h"
#include "autotune/record_lookup.h"
#include "autotune/search_space.h"
#include "autotune/tuning_loop.h"
#include "autotune/tuning_record.h"
#include "kernels/program_library.h"
#include "reference/random_matrix.h"
#include "runtime/orthogonalize.h"
#include "test_support.h"

namespace orthojit {
namespace {

using autotune::RestartChoice;
using Polynomials = std::vector<std::vector<double>>;

// The scalar Gram iteration written out from apply_strategy's statements on 1x1 matrices, with the
// perturbation added wherever R is formed from X: R = X·Xᵀ + δ; per step Z = Σ p_j R^j (powers,
// not Horner), Q = Z or Q·Z, R ← Z·(R·Z); before a restart X ← Q·X, R = X·Xᵀ + δ, Q none.
std::vector<double> direct_q(const Polynomials& polynomials, const std::vector<int>& restarts, double x, double delta) {
  std::vector<double> out;
  double r = x * x + delta, q = 0;
  bool have_q = false;
  for (size_t k = 0; k < polynomials.size(); ++k) {
    if (k > 0 && std::find(restarts.begin(), restarts.end(), static_cast<int>(k)) != restarts.end()) {
      x = q * x;
      r = x * x + delta;
      have_q = false;
    }
    double z = 0;
    for (size_t j = 0; j < polynomials[k].size(); ++j) z += polynomials[k][j] * std::pow(r, static_cast<double>(j));
    q = have_q ? q * z : z;
    have_q = true;
    r = z * (r * z);
    out.push_back(q);
  }
  return out;
}

Polynomials polynomials_of(const std::string& name, std::optional<ScalarType> precision = std::nullopt) {
  return autotune::program_step_polynomials(kernels::load_program_by_name_or_path(name), precision);
}

// (a) The search's simulation is the scalar map: every Q_k for random singular values, random
// perturbations and random restart sets of the shipped schedules (degree-2 polynomials in R) and a
// random degree-3 one. Both sides are f64 and round differently (Horner against powers): each step
// carries r's relative error into z = p(r) amplified by at most p's degree (|r·p'(r)/p(r)| <= 3
// once a blown-up r dominates, and z has no cancellation on these schedules otherwise), so over at
// most 10 steps the two agree to within 3^10 · a few · 2^-53 ≈ 1e-11; the bound is 1e-9 relative.
// A wrong restart rule or a dropped perturbation differs at O(1).
TEST(GramRestartSearch, ScalarSimulationIsTheGramMapInF64) {
  std::mt19937_64 random(20261202);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<Polynomials> schedules = {polynomials_of("gram_polar_express5"), polynomials_of("jordan_ns5"), polynomials_of("deepseek_v4")};
  Polynomials cubic;
  for (int k = 0; k < 6; ++k) cubic.push_back({1.9 + 0.2 * unit(random), -1.2 - 0.1 * unit(random), 0.4, -0.05 * unit(random)});
  schedules.push_back(cubic);
  int compared = 0;
  for (const Polynomials& polynomials : schedules) {
    const int steps = static_cast<int>(polynomials.size());
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<int> restarts;
      for (int k = 1; k < steps; ++k)
        if (unit(random) < 0.3) restarts.push_back(k);
      const double x = std::pow(10.0, -6.0 * unit(random));
      const double delta = trial % 4 == 0 ? 0.0 : -std::pow(10.0, -2.0 - 4.0 * unit(random));
      const std::vector<double> simulated = autotune::scalar_gram_q(polynomials, restarts, x, delta);
      const std::vector<double> direct = direct_q(polynomials, restarts, x, delta);
      ASSERT_EQ(simulated.size(), direct.size());
      for (size_t k = 0; k < direct.size(); ++k) {
        if (!std::isfinite(direct[k])) {
          EXPECT_FALSE(std::isfinite(simulated[k])) << "step " << k;
          continue;
        }
        EXPECT_NEAR(simulated[k], direct[k], 1e-9 * std::abs(direct[k])) << "step " << k << " x " << x << " delta " << delta << " restarts "
                                                                          << autotune::restarts_text(restarts);
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

// Without the perturbation every restart set computes the same iteration: x times the Q that ends
// each segment (the step before each restart, and the last) is the standard scalar iteration
// x ← x·p_k(x²) (the reason gram equals standard in exact arithmetic). Independent of the restart
// bookkeeping, so a restart that loses Q (X ← X instead of Q·X) fails here.
TEST(GramRestartSearch, UnperturbedRestartsLeaveTheIterationUnchanged) {
  const Polynomials polynomials = polynomials_of("deepseek_v4");
  for (const std::vector<int>& restarts : std::vector<std::vector<int>>{{}, {2}, {1, 3, 5, 7, 9}, {4, 8}})
    for (double x : {1.0, 0.3, 1e-2, 1e-5}) {
      double standard = x;
      for (const auto& p : polynomials) {
        double value = 0;
        for (size_t j = p.size(); j-- > 0;) value = value * standard * standard + p[j];
        standard *= value;
      }
      const std::vector<double> q = autotune::scalar_gram_q(polynomials, restarts, x, 0.0);
      double gram = x * q.back();
      for (int restart : restarts) gram *= q[static_cast<size_t>(restart - 1)];
      EXPECT_NEAR(gram, standard, 1e-12 * std::abs(standard)) << "x " << x << " restarts " << autotune::restarts_text(restarts);
    }
}

// The objective is the largest |Q| the simulation reaches, and the search returns the best set of
// each size (checked here by enumerating every set again with restart_objective).
TEST(GramRestartSearch, SearchFindsTheSmallestObjectivePerSize) {
  const Polynomials polynomials = polynomials_of("deepseek_v4");
  autotune::RestartSearchOptions options;
  options.points = 200;
  options.max_restarts = 3;
  const RestartChoice choice = autotune::search_gram_restarts(polynomials, ScalarType::F16, {2}, options);
  EXPECT_EQ(autotune::search_gram_restarts(polynomials, ScalarType::F16, {2}, options).to_json(), choice.to_json());  // deterministic
  ASSERT_EQ(choice.best_per_count.size(), 4u);
  EXPECT_EQ(choice.perturbation, -std::ldexp(1.0, -11));
  EXPECT_EQ(choice.sets_searched, 1u + 9u + 36u + 84u);
  const std::vector<double> spectrum = autotune::restart_search_spectrum(options);
  // Size 2 by hand: every pair.
  double best = std::numeric_limits<double>::infinity();
  for (int a = 1; a < 10; ++a)
    for (int b = a + 1; b < 10; ++b) best = std::min(best, autotune::restart_objective(polynomials, {a, b}, spectrum, choice.perturbation));
  EXPECT_EQ(choice.best_per_count[2].objective, best);
  EXPECT_EQ(choice.program.objective, autotune::restart_objective(polynomials, {2}, spectrum, choice.perturbation));
  // The chosen set is one of the per-size bests, and no larger size is worth its products.
  double chosen_size = static_cast<double>(choice.positions.size());
  for (const auto& set : choice.best_per_count) {
    const double extra = static_cast<double>(set.positions.size()) - chosen_size;
    if (extra > 0) {
      EXPECT_GT(set.objective * std::pow(options.gain_per_restart, extra), choice.objective) << autotune::restarts_text(set.positions);
    }
  }
}

// The default search (2000 points, every size while the sets number at most 4096) on the longest
// shipped schedule, timed for docs/autotuning.md ("milliseconds").
TEST(GramRestartSearch, DefaultSearchOfDeepseekV4) {
  const auto started = std::chrono::steady_clock::now();
  const RestartChoice choice = autotune::search_gram_restarts(polynomials_of("deepseek_v4"), ScalarType::F16, {2});
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  std::printf("deepseek_v4 f16: %s, max|Q| %.3g, %zu sets in %.1f ms\n", autotune::restarts_text(choice.positions).c_str(), choice.objective,
              choice.sets_searched, ms);
  EXPECT_EQ(choice.sets_searched, 512u);  // all subsets of 1..9
  EXPECT_TRUE(std::isfinite(choice.objective));
  EXPECT_FALSE(std::isfinite(choice.program.objective));  // [2]: Q overflows
}

// ---- (b) f16 Gram on ill-conditioned inputs ------------------------------------------------

// A random matrix with orthonormal columns (modified Gram–Schmidt on Gaussians, twice for f64
// orthogonality): rows x cols, cols <= rows, row-major.
std::vector<double> orthonormal_columns(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<double> a = reference::gaussian_values(rows * cols, seed);
  auto at = [&](int64_t i, int64_t j) -> double& { return a[static_cast<size_t>(i * cols + j)]; };
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t p = 0; p < j; ++p) {
        double dot = 0;
        for (int64_t i = 0; i < rows; ++i) dot += at(i, p) * at(i, j);
        for (int64_t i = 0; i < rows; ++i) at(i, j) -= dot * at(i, p);
      }
      double norm = 0;
      for (int64_t i = 0; i < rows; ++i) norm += at(i, j) * at(i, j);
      for (int64_t i = 0; i < rows; ++i) at(i, j) /= std::sqrt(norm);
    }
  return a;
}

// U·diag(σ)·Vᵀ, m x n (m <= n), σ log-spaced from 1 down to sigma_min.
std::vector<double> ill_conditioned(int64_t m, int64_t n, double sigma_min, uint64_t seed) {
  const std::vector<double> u = orthonormal_columns(m, m, seed), v = orthonormal_columns(n, m, seed + 1);
  std::vector<double> x(static_cast<size_t>(m * n), 0.0);
  for (int64_t k = 0; k < m; ++k) {
    const double sigma = std::pow(sigma_min, static_cast<double>(k) / static_cast<double>(m - 1));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) x[static_cast<size_t>(i * n + j)] += u[static_cast<size_t>(i * m + k)] * sigma * v[static_cast<size_t>(j * m + k)];
  }
  return x;
}

std::vector<double> run_gram(const dsl::Program& program, const std::vector<double>& input, int64_t m, int64_t n, ScalarType precision,
                             const std::vector<int>& restarts) {
  passes::CompileOptions options;
  options.rows = m;
  options.cols = n;
  options.strategy = ir::StrategyKind::Gram;
  options.precision = precision;
  options.gram_restarts = restarts;
  return reference::interpret(passes::compile_program(program, options), input);
}

double error_or_inf(const std::vector<double>& output, const std::vector<double>& exact) {
  for (double value : output)
    if (!std::isfinite(value)) return std::numeric_limits<double>::infinity();
  return testing::relative_error(output, exact);
}

struct Errors {
  double standard, chosen, fixed;
  std::vector<int> positions;
};

// The distance of each f16 output to the f64 standard iteration of the same program on the same
// input (‖O − O_f64‖_F / ‖O_f64‖_F): in exact arithmetic gram with any restarts is that iteration,
// so the distance is what the f16 storage costs, which the restarts are there to bound. (The
// distance of the singular values from the band would not see errors in the singular vectors, and
// polar(X) is not what 5-10 steps reach for σ = 1e-6 with either strategy.)
Errors measure(const std::string& name, double sigma_min, uint64_t seed, ScalarType precision = ScalarType::F16) {
  const dsl::Program program = kernels::load_program_by_name_or_path(name);
  const int64_t m = 24, n = 64;
  const std::vector<double> input = ill_conditioned(m, n, sigma_min, seed);
  const std::vector<double> exact = testing::run(program, input, m, n, ir::StrategyKind::Standard, ScalarType::F64);
  const RestartChoice choice = autotune::search_gram_restarts(autotune::program_step_polynomials(program, precision), precision, {2});
  Errors errors;
  errors.positions = choice.positions;
  errors.standard = error_or_inf(testing::run(program, input, m, n, ir::StrategyKind::Standard, precision), exact);
  errors.chosen = error_or_inf(run_gram(program, input, m, n, precision, choice.positions), exact);
  errors.fixed = error_or_inf(run_gram(program, input, m, n, precision, {2}), exact);
  std::printf("%-20s %s sigma_min %.0e seed %llu: standard %.3e  gram %s %.3e  gram [2] %.3e\n", name.c_str(), std::string(to_string(precision)).c_str(), sigma_min,
              static_cast<unsigned long long>(seed), errors.standard, autotune::restarts_text(choice.positions).c_str(), errors.chosen, errors.fixed);
  return errors;
}

// The test. gram_polar_express5 (the shipped f16 program, Dao-AILab's setting, fixed [2])
// and deepseek_v4 run in f16 (10 steps) on 24x64 inputs with σ log-spaced 1 .. 1e-4 and 1 .. 1e-6.
// Measured (this test's printout): the chosen restarts' error is 0.84-1.11x the standard
// strategy's, fixed [2]'s is 2.5-4.8x for gram_polar_express5 and not finite for deepseek_v4 (Q
// overflows f16). Within the standard's error here means at most 1.25x it: the f16 error of either
// strategy moves by about 10% from seed to seed, so 1.25x is rounding noise and 2x is not.
TEST(GramRestartSearch, ChosenRestartsKeepF16GramWithinTheStandardError) {
  for (const char* name : {"gram_polar_express5", "deepseek_v4"})
    for (double sigma_min : {1e-4, 1e-6})
      for (uint64_t seed : {11u, 12u}) {
        const Errors errors = measure(name, sigma_min, seed);
        EXPECT_TRUE(std::isfinite(errors.standard)) << name;
        EXPECT_LE(errors.chosen, 1.25 * errors.standard) << name << " with " << autotune::restarts_text(errors.positions) << ", sigma_min " << sigma_min;
        EXPECT_GT(errors.fixed, 2.0 * errors.standard) << name << " with [2], sigma_min " << sigma_min;
      }
}

// The same measurement in bf16 (the shipped polar_express5 and deepseek_v4 store bf16), printed for
// docs/autotuning.md; run by hand with --gtest_also_run_disabled_tests.
TEST(GramRestartSearch, DISABLED_MeasureBf16) {
  for (const char* name : {"polar_express5", "deepseek_v4", "jordan_ns5"})
    for (double sigma_min : {1e-4, 1e-6}) measure(name, sigma_min, 11, ScalarType::BF16);
}

// ---- (c) the record's restarts, and the request's errors ------------------------------------

// A one-candidate entry as the tuning loop writes it (gram winner), with `restarts` when given.
nlohmann::json gram_entry(const dsl::Program& program, int64_t rows, int64_t cols, const std::optional<std::vector<int>>& restarts) {
  autotune::TuneProblem problem;
  problem.program = &program;
  problem.program_name = program.name;
  problem.rows = rows;
  problem.cols = cols;
  problem.gram_restarts = restarts;
  if (restarts) {
    problem.gram_restarts_source = "auto";
    problem.restart_search = {{"restarts", *restarts}};
  }
  autotune::Candidate gram;
  gram.strategy = ir::StrategyKind::Gram;
  autotune::Trial trial;
  trial.label = gram.label();
  trial.config = gram.to_json();
  trial.strategy = gram.strategy;
  trial.is_default = true;
  trial.status = autotune::TrialStatus::Ok;
  trial.timing.samples_ms = {1.0};
  autotune::summarize(trial.timing);
  const autotune::ProblemKey key = autotune::problem_key(program, rows, cols, 1, std::nullopt);
  return autotune::make_tuning_entry(problem, key, nlohmann::json::object(), {trial}, 0.02, trial.label, "test", 1);
}

// Written by the loop, merged into a file, read back, and applied by the runtime under strategy
// auto; an entry without the field (every record before restarts were tuned) keeps the program's.
TEST(GramRestartSearch, RecordedRestartsRoundTripAndTheRuntimeAppliesThem) {
  const dsl::Program program = kernels::load_program_by_name_or_path("gram_polar_express5");
  const std::filesystem::path directory = std::filesystem::temp_directory_path() / ("orthojit_restarts_" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  const int64_t rows = 24, cols = 64;
  const std::string key = autotune::problem_key(program, rows, cols, 1, std::nullopt).key;
  struct Case {
    std::optional<std::vector<int>> recorded;
    std::vector<int> applied;
  };
  int index = 0;
  for (const Case& c : {Case{std::vector<int>{1, 3}, {1, 3}}, Case{std::nullopt, program.gram_restarts}, Case{std::vector<int>{}, {}}}) {
    const std::string path = (directory / ("records" + std::to_string(index++) + ".json")).string();
    const nlohmann::json entry = gram_entry(program, rows, cols, c.recorded);
    EXPECT_EQ(entry.contains("gram_restarts"), c.recorded.has_value());
    std::string warning;
    autotune::merge_into_tuning_file(path, autotune::cpu_fingerprint(), {{key, entry}}, &warning);
    const autotune::LoadedRecords loaded = autotune::load_tuning_file(path);
    ASSERT_TRUE(loaded.file) << loaded.warning;
    const nlohmann::json& read = loaded.file->entries.at(key);
    EXPECT_EQ(autotune::recorded_restarts(read, static_cast<int>(program.steps.size())), c.recorded);
    if (c.recorded) {
      EXPECT_EQ(read.at("gram_restarts_source"), "auto");
    }

    ::setenv("ORTHOJIT_TUNING_FILE", path.c_str(), 1);
    runtime::OrthogonalizeOptions options;
    options.strategy = "auto";
    options.backend = "ref";
    const auto compiled = runtime::compile_orthogonalizer(program, 1, rows, cols, options);
    EXPECT_EQ(compiled->strategy(), ir::StrategyKind::Gram) << compiled->strategy_reason();
    EXPECT_EQ(compiled->function().strategy.gram_restarts, c.applied) << compiled->strategy_reason();
    if (c.recorded) {
      EXPECT_NE(compiled->strategy_reason().find("gram restarts " + autotune::restarts_text(*c.recorded)), std::string::npos);
    }
    // Restarts given by the caller win over the record's (the record is then not consulted).
    options.gram_restarts = std::vector<int>{4};
    EXPECT_EQ(runtime::compile_orthogonalizer(program, 1, rows, cols, options)->function().strategy.gram_restarts, std::vector<int>{4});
  }
  ::unsetenv("ORTHOJIT_TUNING_FILE");
  std::filesystem::remove_all(directory);
}

TEST(GramRestartSearch, MalformedRecordedRestartsAreReported) {
  auto message = [](const nlohmann::json& entry) {
    try {
      autotune::recorded_restarts(entry, 5);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"gram_restarts", {2, 7}}}).find("restart position 7 is outside 1..4"), std::string::npos);
  EXPECT_NE(message({{"gram_restarts", "2"}}).find("not a list of step indices"), std::string::npos);
  EXPECT_NE(message({{"gram_restarts", {2.5}}}).find("holds 2.5, not a step index"), std::string::npos);
}

TEST(GramRestartSearch, RequestsParseAndBadOnesSayWhatIsValid) {
  using Mode = autotune::RestartRequest::Mode;
  EXPECT_EQ(autotune::parse_restart_request("auto", 5).mode, Mode::Auto);
  EXPECT_EQ(autotune::parse_restart_request("program", 5).mode, Mode::Program);
  const auto none = autotune::parse_restart_request("none", 5);
  EXPECT_EQ(none.mode, Mode::Explicit);
  EXPECT_TRUE(none.positions.empty());
  EXPECT_EQ(autotune::parse_restart_request("3,1", 5).positions, (std::vector<int>{1, 3}));
  auto message = [](const std::string& text, int steps) {
    try {
      autotune::parse_restart_request(text, steps);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("7", 5).find("restart position 7 is outside 1..4: the program has 5 steps"), std::string::npos) << message("7", 5);
  EXPECT_NE(message("0", 5).find("restart position 0 is outside 1..4"), std::string::npos);
  EXPECT_NE(message("2,2", 5).find("restart position 2 is given twice"), std::string::npos);
  EXPECT_NE(message("2,x", 5).find("'x' is not a step index; expected auto, none, program, or comma-separated step indices in 1..4"),
            std::string::npos) << message("2,x", 5);
  EXPECT_NE(message("", 5).find("an empty position"), std::string::npos);
  EXPECT_NE(message("1", 1).find("the program has 1 step, so no restart fits"), std::string::npos) << message("1", 1);
}

}  // namespace
}  // namespace orthojit
