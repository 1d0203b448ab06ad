// Reference interpreter tests against independent references: the Newton–Schulz formulas written
// out directly, the scalar polynomial map on singular values (via a Jacobi SVD), and identities
// the iteration must satisfy (transpose, zero input, batch, standard = gram in f64).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kernels/program_library.h"
#include "reference/random_matrix.h"
#include "reference/singular_values.h"
#include "support/rounding.h"
#include "test_support.h"

namespace orthojit {
namespace {

using ir::StrategyKind;
using testing::relative_error;

// Newton–Schulz written out with plain loops: X0 = G / (‖G‖·s + eps); per step A = X·Xᵀ,
// B = b·A + c·A·A, X = a·X + B·X. `round` is applied where a kernel stores a value (identity for f64).
std::vector<double> direct_steps(const dsl::Program& program, std::vector<double> x, int64_t m, int64_t n, const std::function<double(double)>& store);

std::vector<double> direct_newton_schulz(const dsl::Program& program, std::vector<double> g, int64_t m, int64_t n,
                                         const std::function<double(double)>& store, const std::function<double(double)>& norm_round) {
  double sum = 0;
  for (double v : g) sum += v * v;
  const double norm = norm_round(std::sqrt(sum));
  const double denominator = norm_round(norm_round(norm * program.normalization.safety) + program.normalization.eps);
  std::vector<double> x(g.size());
  for (size_t i = 0; i < g.size(); ++i) x[i] = store(g[i] / denominator);
  return direct_steps(program, std::move(x), m, n, store);
}

// The steps alone, from an already normalized X.
std::vector<double> direct_steps(const dsl::Program& program, std::vector<double> x, int64_t m, int64_t n, const std::function<double(double)>& store) {
  std::vector<double> a_mat(static_cast<size_t>(m * m)), b_mat(a_mat.size()), next(x.size());
  for (const auto& t : program.steps) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += x[static_cast<size_t>(i * n + k)] * x[static_cast<size_t>(j * n + k)];
        a_mat[static_cast<size_t>(i * m + j)] = store(s);
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t k = 0; k < m; ++k) s += a_mat[static_cast<size_t>(i * m + k)] * a_mat[static_cast<size_t>(k * m + j)];
        b_mat[static_cast<size_t>(i * m + j)] = store(t.c * s + t.b * a_mat[static_cast<size_t>(i * m + j)]);
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < m; ++k) s += b_mat[static_cast<size_t>(i * m + k)] * x[static_cast<size_t>(k * n + j)];
        next[static_cast<size_t>(i * n + j)] = store(1.0 * s + t.a * x[static_cast<size_t>(i * n + j)]);
      }
    std::swap(x, next);
  }
  return x;
}

double identity(double v) { return v; }

// AOL's rescaling written out (Prach & Lampert, arXiv 2208.03160; Turbo-Muon, arXiv 2512.04632):
// for the wide m x n matrix G (m <= n), row i times 1/sqrt(max(Σ_j |(G·Gᵀ)_ij|, eps)).
std::vector<double> aol_precondition(const std::vector<double>& g, int64_t m, int64_t n, double eps) {
  std::vector<double> out(g.size());
  for (int64_t i = 0; i < m; ++i) {
    double d = 0;
    for (int64_t j = 0; j < m; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += g[static_cast<size_t>(i * n + k)] * g[static_cast<size_t>(j * n + k)];
      d += std::fabs(dot);
    }
    const double s = 1.0 / std::sqrt(std::max(d, eps));
    for (int64_t k = 0; k < n; ++k) out[static_cast<size_t>(i * n + k)] = g[static_cast<size_t>(i * n + k)] * s;
  }
  return out;
}

dsl::Program shipped(const std::string& name) { return kernels::load_program_by_name_or_path(name); }

TEST(Interpreter, MatchesDirectFormulaInFloat64) {
  const int64_t m = 12, n = 30;
  for (const char* name : {"jordan_ns5", "polar_express5", "deepseek_v4"}) {
    SCOPED_TRACE(name);
    const auto g = reference::gaussian_values(m * n, 11);
    const auto expected = direct_newton_schulz(shipped(name), g, m, n, identity, identity);
    const auto got = testing::run(shipped(name), g, m, n, StrategyKind::Standard, ScalarType::F64);
    // Same operations in f64, different summation grouping only: a few ulps times the growth.
    EXPECT_LT(relative_error(got, expected), 1e-12);
  }
}

TEST(Interpreter, EmulatesBfloat16StorageExactlyLikeTheDirectFormula) {
  const int64_t m = 10, n = 24;
  const auto program = shipped("jordan_ns5");
  const auto g = reference::gaussian_values(m * n, 12);
  auto store = [](double v) { return round_to(ScalarType::BF16, round_to(ScalarType::F32, v)); };
  auto norm_round = [](double v) { return round_to(ScalarType::F32, v); };
  const auto expected = direct_newton_schulz(program, g, m, n, store, norm_round);
  const auto got = testing::run(program, g, m, n);
  // Identical rounding points and exact f64 sums: only a tie decided differently by a last-ulp
  // difference of the f64 sums could differ, which these inputs do not hit.
  EXPECT_LT(relative_error(got, expected), 1e-12);
  // And the emulation is really active: bf16 differs from the exact iteration by about
  // steps · 2^-8 (storage roundoff amplified by the polynomial's slope), not by 0 and not by O(1).
  const auto exact = testing::run(program, g, m, n, StrategyKind::Standard, ScalarType::F64);
  const double bf16_error = relative_error(got, exact);
  EXPECT_GT(bf16_error, 1e-4);
  EXPECT_LT(bf16_error, 5e-2);
  for (double v : got) EXPECT_EQ(v, round_to(ScalarType::BF16, v));  // every output is a bf16 value
}

TEST(Interpreter, GramEqualsStandardInFloat64) {
  for (const auto& entry : kernels::shipped_programs()) {
    const auto program = shipped(std::string(entry.name));
    for (auto [m, n] : {std::pair<int64_t, int64_t>{16, 48}, {48, 16}, {20, 20}, {7, 33}}) {
      SCOPED_TRACE(std::string(entry.name) + " " + std::to_string(m) + "x" + std::to_string(n));
      const auto g = reference::gaussian_values(m * n, static_cast<uint64_t>(m * 1000 + n));
      const auto standard = testing::run(program, g, m, n, StrategyKind::Standard, ScalarType::F64);
      const auto gram = testing::run(program, g, m, n, StrategyKind::Gram, ScalarType::F64);
      // The same polynomial evaluated in another order: rounding ~1e-16 amplified by at most
      // ~1e4 through the steps (the polynomials' slopes near small singular values).
      EXPECT_LT(relative_error(gram, standard), 1e-10);
    }
  }
}

TEST(Interpreter, GramWithoutRestartsAndWithTwoRestarts) {
  const auto program = shipped("polar_express5");
  const int64_t m = 9, n = 40;
  const auto g = reference::gaussian_values(m * n, 5);
  const auto standard = testing::run(program, g, m, n, StrategyKind::Standard, ScalarType::F64);
  for (std::vector<int> restarts : {std::vector<int>{}, {1, 3}, {1, 2, 3, 4}}) {
    passes::CompileOptions options;
    options.rows = m;
    options.cols = n;
    options.strategy = StrategyKind::Gram;
    options.precision = ScalarType::F64;
    options.gram_restarts = restarts;
    const auto gram = reference::interpret(passes::compile_program(program, options), g);
    EXPECT_LT(relative_error(gram, standard), 1e-10) << restarts.size() << " restarts";
  }
}

TEST(Interpreter, TransposedInputGivesTransposedOutput) {
  const int64_t m = 11, n = 29;
  for (const char* name : {"jordan_ns5", "polar_express5_f32", "gram_polar_express5"}) {
    for (auto strategy : {StrategyKind::Standard, StrategyKind::Gram}) {
      SCOPED_TRACE(std::string(name) + (strategy == StrategyKind::Gram ? " gram" : " standard"));
      const auto g = reference::gaussian_values(m * n, 21);
      const auto wide = testing::run(shipped(name), g, m, n, strategy);
      const auto tall = testing::run(shipped(name), testing::transpose(g, m, n), n, m, strategy);
      // The tall run is the wide run on the same numbers (orientation), so the 16-bit results agree
      // up to the norm's summation order, which changes the f64 sum in its last bits at most.
      EXPECT_LT(relative_error(testing::transpose(tall, n, m), wide), 1e-12);
      const auto wide64 = testing::run(shipped(name), g, m, n, strategy, ScalarType::F64);
      const auto tall64 = testing::run(shipped(name), testing::transpose(g, m, n), n, m, strategy, ScalarType::F64);
      EXPECT_LT(relative_error(testing::transpose(tall64, n, m), wide64), 1e-13);
    }
  }
}

TEST(Interpreter, ZeroInputGivesZeroOutput) {
  for (const auto& entry : kernels::shipped_programs()) {
    for (auto strategy : {StrategyKind::Standard, StrategyKind::Gram}) {
      for (auto [m, n] : {std::pair<int64_t, int64_t>{5, 9}, {9, 5}}) {
        const auto out = testing::run(shipped(std::string(entry.name)), std::vector<double>(static_cast<size_t>(m * n), 0.0), m, n, strategy);
        for (double v : out) ASSERT_EQ(v, 0.0) << entry.name;  // and not NaN
      }
    }
  }
  // The clamp mode X / max(‖X‖·s, eps) is safe at zero too.
  const auto clamp = ir::load_program(R"(orthogonalizer z {
    normalize frobenius(eps = 1e-7, mode = clamp);
    coefficients jordan repeat 3;
    step { A = X @ X.T; X = a * X + (b * A + c * A @ A) @ X; }
  })");
  for (double v : testing::run(clamp, std::vector<double>(12, 0.0), 3, 4)) EXPECT_EQ(v, 0.0);
}

TEST(Interpreter, BufferPlanDoesNotChangeTheResult) {
  for (const char* name : {"jordan_ns5", "classical", "deepseek_v4"}) {
    for (auto strategy : {StrategyKind::Standard, StrategyKind::Gram}) {
      const int64_t m = 8, n = 20;
      const auto g = reference::gaussian_values(m * n, 3);
      ir::Function planned = testing::compile(shipped(name), m, n, strategy);
      ASSERT_FALSE(planned.buffers.empty());
      ir::Function unplanned = planned;
      unplanned.buffers.clear();
      for (auto& node : unplanned.nodes) node.buffer = -1;
      EXPECT_EQ(reference::interpret(planned, g), reference::interpret(unplanned, g)) << name;  // bit for bit
    }
  }
}

TEST(Interpreter, BatchEqualsSeparateRuns) {
  const int64_t m = 6, n = 14, batch = 3;
  const auto program = shipped("polar_express5");
  const auto g = reference::gaussian_values(m * n * batch, 8);
  const auto batched = testing::run(program, g, m, n, StrategyKind::Gram, std::nullopt, batch);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> one(g.begin() + b * m * n, g.begin() + (b + 1) * m * n);
    const auto single = testing::run(program, one, m, n, StrategyKind::Gram);
    EXPECT_EQ(std::vector<double>(batched.begin() + b * m * n, batched.begin() + (b + 1) * m * n), single);
  }
  std::vector<double> short_input(g.begin(), g.end() - 1);
  EXPECT_THROW(reference::interpret(testing::compile(program, m, n, StrategyKind::Standard, std::nullopt, batch), short_input),
               std::invalid_argument);
}

// The exact iteration acts on each singular value alone: σ ← a·σ + b·σ³ + c·σ⁵ after σ₀ = σ/(‖G‖·s + eps).
// An AOL program (normalize aol) maps the singular values of the preconditioned input diag(s)·G
// instead (aol_precondition below), which no scalar function of G's singular values gives.
TEST(Interpreter, SingularValuesFollowTheScalarPolynomialMap) {
  const int64_t m = 24, n = 64;
  const auto g = reference::gaussian_values(m * n, 99);
  const auto input_sigma = reference::singular_values(g, m, n);
  double frobenius = 0;
  for (double s : input_sigma) frobenius += s * s;
  frobenius = std::sqrt(frobenius);
  const auto aol_sigma = reference::singular_values(aol_precondition(g, m, n, 1e-7), m, n);
  for (const auto& entry : kernels::shipped_programs()) {
    SCOPED_TRACE(std::string(entry.name));
    const auto program = shipped(std::string(entry.name));
    const bool aol = program.normalization.kind == dsl::Normalization::Kind::Aol;
    const double scaled = frobenius * program.normalization.safety;
    const double denominator = program.normalization.mode == dsl::Normalization::Mode::Add ? scaled + program.normalization.eps
                                                                                           : std::max(scaled, program.normalization.eps);
    std::vector<double> expected;
    for (double s : aol ? aol_sigma : input_sigma) {
      double x = aol ? s : s / denominator;
      for (const auto& t : program.steps) x = t.a * x + t.b * x * x * x + t.c * x * x * x * x * x;
      expected.push_back(std::fabs(x));
    }
    std::sort(expected.rbegin(), expected.rend());
    const auto output = testing::run(program, g, m, n, StrategyKind::Standard, ScalarType::F64);
    const auto sigma = reference::singular_values(output, m, n);
    for (size_t i = 0; i < sigma.size(); ++i) EXPECT_NEAR(sigma[i], expected[i], 1e-9);
  }
}

// Each shipped program's own precision: its output's singular values lie in the band the method is
// known for (docs/dsl.md §5, with the sources; the f64 bands are the scalar maps' images of the
// input's normalized singular values, about [0.1, 1] here, widened by the storage error). Gram with
// bf16 storage is measurably worse than standard for Polar Express (its first steps' large slopes
// amplify the rounding of R and Q: σ reaches about [0.80, 1.22] against [0.86, 1.14]), which is why
// Dao-AILab's Gram-NS stores f16 (gram_polar_express5 stays within [0.84, 1.14]); its band says so.
TEST(Interpreter, ShippedProgramsLandInTheirKnownBands) {
  struct Band {
    const char* name;
    double low, high;            // standard
    double gram_low, gram_high;  // gram
  };
  const Band bands[] = {
      {"jordan_ns5", 0.5, 1.5, 0.5, 1.5},
      {"jordan_ns5_f32", 0.5, 1.5, 0.5, 1.5},
      {"polar_express5", 0.8, 1.2, 0.75, 1.25},
      {"polar_express5_f32", 0.8, 1.2, 0.8, 1.2},
      {"gram_polar_express5", 0.8, 1.2, 0.8, 1.2},
      {"deepseek_v4", 0.95, 1.05, 0.95, 1.05},
      {"deepseek_v4_f32", 0.99, 1.01, 0.99, 1.01},
      {"classical", 0.999, 1.001, 0.999, 1.001},
      // CANS's five steps map (0.001, 1] into [0.884, 1.120] in f64; f32 storage adds ~1e-6.
      {"cans5", 0.85, 1.15, 0.85, 1.15},
      // Turbo-Muon's `aol` steps map AOL's output range here (about [0.05, 0.8]) into
      // [0.987, 1.012] in f64, bf16 storage adds ~1e-2 (the set is negative near σ = 1: docs/dsl.md).
      {"turbo_muon4", 0.95, 1.05, 0.95, 1.05},
  };
  const int64_t m = 32, n = 128;
  const auto g = reference::gaussian_values(m * n, 2024);
  for (const auto& band : bands) {
    for (auto strategy : {StrategyKind::Standard, StrategyKind::Gram}) {
      SCOPED_TRACE(std::string(band.name) + (strategy == StrategyKind::Gram ? " gram" : " standard"));
      const auto sigma = reference::singular_values(testing::run(shipped(band.name), g, m, n, strategy), m, n);
      const bool gram = strategy == StrategyKind::Gram;
      EXPECT_GE(sigma.back(), gram ? band.gram_low : band.low);
      EXPECT_LE(sigma.front(), gram ? band.gram_high : band.high);
    }
  }
}

}  // namespace
}  // namespace orthojit

namespace orthojit {
namespace {

// Turbo-Muon's program against the formula written out: AOL on the wide side (a tall G is
// preconditioned through Gᵀ·G, i.e. by columns), then the four quintic steps, in f64. A program
// whose one step is X ← 1·X (a = 1, b = c = 0) returns AOL's output itself, whose spectral norm
// AOL bounds by 1.
TEST(Interpreter, AolPreconditioningMatchesItsFormula) {
  const dsl::Program turbo = shipped("turbo_muon4");
  ASSERT_EQ(turbo.normalization.kind, dsl::Normalization::Kind::Aol);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{12, 30}, {30, 12}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n));
    const auto g = reference::gaussian_values(m * n, 20251);
    const bool tall = m > n;
    const int64_t rows = tall ? n : m, cols = tall ? m : n;
    const auto wide = tall ? testing::transpose(g, m, n) : g;
    auto expected = direct_steps(turbo, aol_precondition(wide, rows, cols, turbo.normalization.eps), rows, cols, identity);
    if (tall) expected = testing::transpose(expected, rows, cols);
    const auto got = testing::run(turbo, g, m, n, StrategyKind::Standard, ScalarType::F64);
    // Same operations in f64, other summation order: a few ulps grown by the four steps' slopes.
    EXPECT_LT(relative_error(got, expected), 1e-12);

    dsl::Program identity_step = turbo;
    identity_step.steps.assign(1, dsl::Triple{1.0, 0.0, 0.0});
    const auto preconditioned = testing::run(identity_step, g, m, n, StrategyKind::Standard, ScalarType::F64);
    auto direct = aol_precondition(wide, rows, cols, turbo.normalization.eps);
    if (tall) direct = testing::transpose(direct, rows, cols);
    EXPECT_LT(relative_error(preconditioned, direct), 1e-14);
    const auto sigma = reference::singular_values(preconditioned, m, n);
    EXPECT_LE(sigma.front(), 1.0 + 1e-12);  // AOL's bound ‖diag(s)·G‖₂ <= 1
    EXPECT_GT(sigma.back(), 0.05);          // and no collapse (Gaussian G: about 0.3 here)
  }
}

}  // namespace
}  // namespace orthojit
