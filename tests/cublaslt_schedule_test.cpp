// The cuBLASLt Newton–Schulz baseline without a GPU: its sequence of cublasLtMatmul calls (every
// operand, transposition, α, β and C/D buffer, cublaslt_schedule.h) executed here in f64 with
// cuBLASLt's column-major semantics and compared with the Newton–Schulz formula in plain f64
// (tests/f64_newton_schulz.h) and with the reference interpreter; planted bugs (a β, an operand
// order, a transposition, a C buffer) must fail that comparison. Also: the variant's label and
// parsing, and the reasons it gives when the library or the device is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <stdexcept>

#include "cuda/cublaslt_newton_schulz.h"
#include "cuda/cublaslt_schedule.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_driver.h"
#include "f64_newton_schulz.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "test_support.h"

namespace orthojit::cuda {
namespace {

// Executes `schedule` on one matrix in f64 exactly as cuBLASLt would: column-major buffers,
// D = α·op(A)·op(B) + β·C, D never aliasing A or B, every buffer but the input and the identity
// starting as NaN (so reading a value that was never written poisons the result). Throws
// std::logic_error on a dimension mismatch or an aliasing D.
std::vector<double> run_schedule_f64(const LtSchedule& schedule, const std::vector<double>& g, int64_t rows, int64_t cols,
                                     const dsl::Normalization& normalization) {
  std::vector<std::vector<double>> buffers;
  for (const LtBuffer& buffer : schedule.buffers) {
    buffers.emplace_back(static_cast<size_t>(buffer.rows * buffer.cols), std::numeric_limits<double>::quiet_NaN());
    if (buffer.identity) {
      std::fill(buffers.back().begin(), buffers.back().end(), 0.0);
      for (int64_t d = 0; d < buffer.rows; ++d) buffers.back()[static_cast<size_t>(d * buffer.rows + d)] = 1.0;
    }
  }
  // Normalize and orient: row-major m x n X (transposed when tall) into the input buffer.
  double norm = 0;
  for (double v : g) norm += v * v;
  norm = std::sqrt(norm) * normalization.safety;
  const double denominator = normalization.mode == dsl::Normalization::Mode::Clamp ? std::max(norm, normalization.eps) : norm + normalization.eps;
  std::vector<double>& x = buffers.at(static_cast<size_t>(schedule.input));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(schedule.transpose ? j * rows + i : i * cols + j)] = g[static_cast<size_t>(i * cols + j)] / denominator;
  for (const LtOp& op : schedule.ops) {
    const LtBuffer& D = schedule.buffers.at(static_cast<size_t>(op.d));
    if (op.kind == LtOp::Kind::AddIdentity) {
      if (D.rows != D.cols) throw std::logic_error(op.what + ": diagonal add on a non-square buffer");
      for (int64_t d = 0; d < D.rows; ++d) buffers[static_cast<size_t>(op.d)][static_cast<size_t>(d * D.rows + d)] += op.gamma;
      continue;
    }
    const LtBuffer& A = schedule.buffers.at(static_cast<size_t>(op.a));
    const LtBuffer& B = schedule.buffers.at(static_cast<size_t>(op.b));
    if ((op.transa ? A.cols : A.rows) != op.m || (op.transa ? A.rows : A.cols) != op.k) throw std::logic_error(op.what + ": A's shape");
    if ((op.transb ? B.cols : B.rows) != op.k || (op.transb ? B.rows : B.cols) != op.n) throw std::logic_error(op.what + ": B's shape");
    if (D.rows != op.m || D.cols != op.n) throw std::logic_error(op.what + ": D's shape");
    if (op.d == op.a || op.d == op.b) throw std::logic_error(op.what + ": D aliases an operand");
    if (D.identity) throw std::logic_error(op.what + ": writes the identity");
    if (op.c >= 0) {
      const LtBuffer& C = schedule.buffers.at(static_cast<size_t>(op.c));
      if (C.rows != op.m || C.cols != op.n) throw std::logic_error(op.what + ": C's shape");
    }
    const std::vector<double>& a = buffers[static_cast<size_t>(op.a)];
    const std::vector<double>& b = buffers[static_cast<size_t>(op.b)];
    std::vector<double> d(static_cast<size_t>(op.m * op.n));
    for (int64_t j = 0; j < op.n; ++j)
      for (int64_t i = 0; i < op.m; ++i) {
        double sum = 0;
        for (int64_t l = 0; l < op.k; ++l) {
          const double av = op.transa ? a[static_cast<size_t>(l + i * A.rows)] : a[static_cast<size_t>(i + l * A.rows)];
          const double bv = op.transb ? b[static_cast<size_t>(j + l * B.rows)] : b[static_cast<size_t>(l + j * B.rows)];
          sum += av * bv;
        }
        double value = op.alpha * sum;
        if (op.c >= 0) value += op.beta * buffers[static_cast<size_t>(op.c)][static_cast<size_t>(i + j * op.m)];
        d[static_cast<size_t>(i + j * op.m)] = value;
      }
    buffers[static_cast<size_t>(op.d)] = std::move(d);
  }
  const std::vector<double>& result = buffers.at(static_cast<size_t>(schedule.output));
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[static_cast<size_t>(i * cols + j)] = result[static_cast<size_t>(schedule.transpose ? j * rows + i : i * cols + j)];
  return out;
}

std::vector<double> gaussian(int64_t count, unsigned seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> normal;
  std::vector<double> values(static_cast<size_t>(count));
  for (double& v : values) v = normal(random);
  return values;
}

// Max |x - y| / max |y|; infinite when x has a NaN.
double error(const std::vector<double>& x, const std::vector<double>& y) {
  double difference = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return std::numeric_limits<double>::infinity();
    difference = std::max(difference, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return difference / scale;
}

// Jordan's quintic five times, and Polar Express-like distinct steps.
const std::vector<std::vector<double>> kJordan(5, {3.4445, -4.7750, 2.0315});
const std::vector<std::vector<double>> kDistinct = {{8.28721, -23.5959, 17.3004}, {4.10706, -2.94785, 0.544843}, {3.94869, -2.9089, 0.551819},
                                                    {3.31842, -2.48849, 0.510049}, {2.30065, -1.6689, 0.418807}};

std::vector<std::array<double, 3>> triples(const std::vector<std::vector<double>>& polynomials) {
  std::vector<std::array<double, 3>> out;
  for (const auto& p : polynomials) out.push_back({p[0], p.size() > 1 ? p[1] : 0.0, p.size() > 2 ? p[2] : 0.0});
  return out;
}

struct Shape {
  int64_t rows, cols;
};
const Shape kShapes[] = {{24, 40}, {40, 24}, {32, 32}, {1, 9}};

TEST(CublasLtSchedule, StandardMatchesTheFormulaInF64) {
  const dsl::Normalization normalization;
  for (const auto& steps : {kJordan, kDistinct})
    for (const Shape& shape : kShapes) {
      const std::vector<double> g = gaussian(shape.rows * shape.cols, 11);
      const LtSchedule schedule = standard_lt_schedule(shape.rows, shape.cols, steps);
      EXPECT_EQ(schedule.ops.size(), 3 * steps.size());
      const auto expected = testing::newton_schulz(g, shape.rows, shape.cols, triples(steps), normalization.eps, false);
      const double e = error(run_schedule_f64(schedule, g, shape.rows, shape.cols, normalization), expected);
      EXPECT_LT(e, 1e-10) << shape.rows << "x" << shape.cols << "\n" << schedule.describe();
    }
}

TEST(CublasLtSchedule, StandardStepsUseBetaAndSeparateCAndD) {
  const LtSchedule schedule = standard_lt_schedule(24, 40, {{3.0, -4.0, 2.0}});
  ASSERT_EQ(schedule.ops.size(), 3u);
  const LtOp &gram = schedule.ops[0], &poly = schedule.ops[1], &update = schedule.ops[2];
  EXPECT_TRUE(gram.transa);
  EXPECT_FALSE(gram.transb);
  EXPECT_EQ(gram.c, -1);
  // B = b·A + c·A·A: C = A, β = b, α = c, D a different buffer.
  EXPECT_EQ(poly.c, gram.d);
  EXPECT_EQ(poly.beta, -4.0);
  EXPECT_EQ(poly.alpha, 2.0);
  EXPECT_NE(poly.d, poly.c);
  // X' = a·X + B·X: C = X, β = a, D the other X buffer.
  EXPECT_EQ(update.c, schedule.input);
  EXPECT_EQ(update.beta, 3.0);
  EXPECT_NE(update.d, update.c);
  EXPECT_EQ(schedule.output, update.d);
  EXPECT_EQ(update.m, 40);  // column-major X'c = Xc·Bc: n x m
  EXPECT_EQ(update.n, 24);
}

TEST(CublasLtSchedule, GramMatchesTheFormulaInF64WithAndWithoutRestarts) {
  const dsl::Normalization normalization;
  for (const auto& steps : {kJordan, kDistinct})
    for (const std::vector<int>& restarts : {std::vector<int>{}, std::vector<int>{2}, std::vector<int>{1, 3}, std::vector<int>{1, 2, 3, 4}})
      for (const Shape& shape : kShapes) {
        const std::vector<double> g = gaussian(shape.rows * shape.cols, 13);
        const LtSchedule schedule = gram_lt_schedule(shape.rows, shape.cols, steps, restarts);
        const auto expected = testing::newton_schulz(g, shape.rows, shape.cols, triples(steps), normalization.eps, false);
        const double e = error(run_schedule_f64(schedule, g, shape.rows, shape.cols, normalization), expected);
        EXPECT_LT(e, 1e-8) << shape.rows << "x" << shape.cols << " restarts " << restarts.size() << "\n" << schedule.describe();
      }
}

TEST(CublasLtSchedule, GramFollowsTheCompilersRestartRule) {
  // Five steps, restart before step 2: R once at the start and once at the restart; the R update
  // after steps 0, 2 and 3 (not after 1, whose next step restarts, nor after the last).
  const LtSchedule schedule = gram_lt_schedule(24, 40, kJordan, {2});
  int grams = 0, updates = 0, restarts = 0, final_products = 0;
  for (const LtOp& op : schedule.ops) {
    grams += op.what.find("R = X·Xᵀ") != std::string::npos;
    updates += op.what.find("R = Z·T") != std::string::npos;
    restarts += op.what.find("restart") != std::string::npos;
    final_products += op.what == "step 4: X = Q·X";
  }
  EXPECT_EQ(grams, 2);
  EXPECT_EQ(updates, 3);
  EXPECT_EQ(restarts, 1);
  EXPECT_EQ(final_products, 1);
  // Z = c·R·R + b·R is one matmul with C = R, β = b, then a·I on the diagonal.
  const LtOp& z = schedule.ops[1];
  EXPECT_EQ(z.c, z.a);
  EXPECT_EQ(z.beta, -4.7750);
  EXPECT_EQ(z.alpha, 2.0315);
  EXPECT_EQ(schedule.ops[2].kind, LtOp::Kind::AddIdentity);
  EXPECT_EQ(schedule.ops[2].gamma, 3.4445);
  EXPECT_THROW(gram_lt_schedule(24, 40, kJordan, {5}), std::invalid_argument);
  EXPECT_THROW(standard_lt_schedule(24, 40, {{1, 2, 3, 4}}), std::invalid_argument);
}

TEST(CublasLtSchedule, HigherDegreeGramUsesHornerWithTheIdentityAsC) {
  // p(R) = 1 + 0.5R - 0.25R² + 0.125R³ as the step X ← p(XXᵀ)·X: Z = (0.125R² - 0.25R + 0.5I)·R + 1·I.
  const std::vector<std::vector<double>> steps = {{1.0, 0.5, -0.25, 0.125}, {1.5, -0.5}};
  const LtSchedule schedule = gram_lt_schedule(16, 24, steps, {});
  bool identity_c = false;
  for (const LtOp& op : schedule.ops)
    if (op.c >= 0 && schedule.buffers[static_cast<size_t>(op.c)].identity) identity_c = op.beta == 1.0;
  EXPECT_TRUE(identity_c) << schedule.describe();
  // The f64 formula for X ← p(X·Xᵀ)·X of any degree.
  const std::vector<double> g = gaussian(16 * 24, 5);
  std::vector<double> x = g;
  double norm = 0;
  for (double v : x) norm += v * v;
  for (double& v : x) v /= std::sqrt(norm) + 1e-7;
  const int64_t m = 16, n = 24;
  for (const auto& p : steps) {
    std::vector<double> a(m * m, 0.0), power(m * m, 0.0), poly(m * m, 0.0), next(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j)
        for (int64_t k = 0; k < n; ++k) a[i * m + j] += x[i * n + k] * x[j * n + k];
    for (int64_t i = 0; i < m; ++i) power[i * m + i] = 1.0;
    for (double coefficient : p) {
      for (size_t e = 0; e < poly.size(); ++e) poly[e] += coefficient * power[e];
      std::vector<double> following(m * m, 0.0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j)
          for (int64_t k = 0; k < m; ++k) following[i * m + j] += power[i * m + k] * a[k * m + j];
      power = following;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < m; ++k) next[i * n + j] += poly[i * m + k] * x[k * n + j];
    x = next;
  }
  EXPECT_LT(error(run_schedule_f64(schedule, g, m, n, {}), x), 1e-10) << schedule.describe();
}

// A planted bug anywhere in the sequence must fail the f64 comparison (or be rejected as a
// shape or aliasing error).
bool caught(const LtSchedule& mutated, const std::vector<double>& g, const Shape& shape, const std::vector<double>& expected) {
  try {
    return error(run_schedule_f64(mutated, g, shape.rows, shape.cols, {}), expected) > 1e-4;
  } catch (const std::logic_error&) {
    return true;
  }
}

TEST(CublasLtSchedule, PlantedBugsFailTheComparison) {
  for (const bool gram : {false, true})
    for (const Shape& shape : {Shape{24, 40}, Shape{32, 32}}) {
      const std::vector<double> g = gaussian(shape.rows * shape.cols, 17);
      const LtSchedule schedule = gram ? gram_lt_schedule(shape.rows, shape.cols, kDistinct, {2}) : standard_lt_schedule(shape.rows, shape.cols, kDistinct);
      const auto expected = testing::newton_schulz(g, shape.rows, shape.cols, triples(kDistinct), 1e-7, false);
      ASSERT_FALSE(caught(schedule, g, shape, expected));
      for (size_t i = 0; i < schedule.ops.size(); ++i) {
        const LtOp& op = schedule.ops[i];
        const std::string where = std::string(gram ? "gram " : "standard ") + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) + " op " +
                                  std::to_string(i) + " (" + op.what + ")";
        auto mutate = [&](auto change) {
          LtSchedule mutated = schedule;
          change(mutated.ops[i]);
          return caught(mutated, g, shape, expected);
        };
        if (op.kind == LtOp::Kind::AddIdentity) {
          EXPECT_TRUE(mutate([](LtOp& o) { o.gamma *= 0.9; })) << where << ": γ";
          continue;
        }
        EXPECT_TRUE(mutate([](LtOp& o) { o.alpha *= 0.9; })) << where << ": α";
        if (op.c >= 0) {
          EXPECT_TRUE(mutate([](LtOp& o) { o.beta *= 0.9; })) << where << ": β";
          EXPECT_TRUE(mutate([](LtOp& o) { o.beta = 0.0; o.c = -1; })) << where << ": C dropped";
          // C taken from another buffer of the same shape.
          for (size_t other = 0; other < schedule.buffers.size(); ++other)
            if (static_cast<int>(other) != op.c && static_cast<int>(other) != op.d && schedule.buffers[other].rows == schedule.buffers[op.c].rows &&
                schedule.buffers[other].cols == schedule.buffers[op.c].cols) {
              EXPECT_TRUE(mutate([&](LtOp& o) { o.c = static_cast<int>(other); })) << where << ": C = " << schedule.buffers[other].name;
            }
        }
        // Operand order and transposition matter wherever X is an operand (the m x m products of
        // Gram are polynomials in one R and commute).
        auto is_x = [&](int buffer) { return schedule.buffers[static_cast<size_t>(buffer)].name[0] == 'X'; };
        const bool has_x = is_x(op.a) || is_x(op.b);
        if (has_x) {
          EXPECT_TRUE(mutate([](LtOp& o) { std::swap(o.a, o.b); std::swap(o.transa, o.transb); })) << where << ": operands swapped";
          EXPECT_TRUE(mutate([](LtOp& o) { o.transa = !o.transa; o.transb = !o.transb; })) << where << ": transpositions flipped";
        }
      }
    }
}

TEST(CublasLtSchedule, TheVariantsScheduleComesFromTheProgram) {
  // jordan_ns5 (gram_restarts [2]) compiled with each strategy: the schedule the runner builds
  // (cublaslt_schedule_for) against the reference interpreter of the same compiled function.
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  for (ir::StrategyKind strategy : {ir::StrategyKind::Standard, ir::StrategyKind::Gram})
    for (const Shape& shape : {Shape{24, 40}, Shape{40, 24}}) {
      const ir::Function function = testing::compile(program, shape.rows, shape.cols, strategy, ScalarType::F32);
      const LtSchedule schedule = cublaslt_schedule_for(function);
      if (strategy == ir::StrategyKind::Gram) {
        EXPECT_EQ(function.strategy.gram_restarts, std::vector<int>{2});
      }
      const std::vector<double> g = gaussian(shape.rows * shape.cols, 19);
      const double e = error(run_schedule_f64(schedule, g, shape.rows, shape.cols, program.normalization), reference::interpret(function, g));
      EXPECT_LT(e, 1e-4) << ir::to_string(strategy) << " " << shape.rows << "x" << shape.cols << "\n" << schedule.describe();
    }
}

TEST(CublasLtVariant, LabelsParseAndRoundTrip) {
  EXPECT_EQ(CudaVariant::parse("cublaslt").kind, CudaVariant::Kind::Cublaslt);
  EXPECT_EQ(CudaVariant::parse("cublaslt").label(), "cublaslt");
  EXPECT_EQ(CudaVariant::parse("cublas").kind, CudaVariant::Kind::Cublas);
  try {
    CudaVariant::parse("cublas-lt");
    FAIL() << "cublas-lt parsed";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("cublaslt"), std::string::npos) << error.what();
  }
  EXPECT_THROW(generate_variant(testing::compile(kernels::load_program_by_name_or_path("jordan_ns5"), 64, 128, ir::StrategyKind::Standard, ScalarType::BF16),
                                CudaVariant::parse("cublaslt")),
               std::invalid_argument);
}

TEST(CublasLtVariant, ReasonsSayWhatIsMissing) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const ir::Function f32 = testing::compile(program, 64, 128, ir::StrategyKind::Standard, ScalarType::F32);
  EXPECT_NE(variant_unavailable_reason(f32, CudaVariant::parse("cublaslt"), 0).find("bf16 or f16"), std::string::npos);
  // Gram is not refused for its strategy (unlike the old cublas variant).
  const ir::Function gram = testing::compile(program, 64, 128, ir::StrategyKind::Gram, ScalarType::BF16);
  const std::string gram_reason = variant_unavailable_reason(gram, CudaVariant::parse("cublaslt"), 0);
  EXPECT_EQ(gram_reason.find("standard strategy"), std::string::npos) << gram_reason;
  EXPECT_EQ(gram_reason, CublasLtNewtonSchulz::unavailable_reason());
  EXPECT_NE(variant_unavailable_reason(gram, CudaVariant::parse("cublas"), 0).find("standard strategy only"), std::string::npos);

#ifdef ORTHOJIT_HAVE_CUBLASLT_BASELINE
  // A library that cannot be found: every name and path tried is in the reason.
  const std::string missing = CublasLtNewtonSchulz::probe_library({"/nonexistent/nvidia/cu13/lib/libcublasLt.so.13", "libcublasLt.so.99"});
  EXPECT_NE(missing.find("/nonexistent/nvidia/cu13/lib/libcublasLt.so.13"), std::string::npos) << missing;
  EXPECT_NE(missing.find("libcublasLt.so.99"), std::string::npos) << missing;
  EXPECT_NE(missing.find("tried"), std::string::npos) << missing;
  const auto candidates = CublasLtNewtonSchulz::library_candidates();
  ASSERT_GE(candidates.size(), 3u);
  EXPECT_NE(std::find(candidates.begin(), candidates.end(), "libcublasLt.so.13"), candidates.end());
  EXPECT_NE(std::find(candidates.begin(), candidates.end(), "libcublasLt.so.12"), candidates.end());
  // An explicit path is tried first.
  setenv("ORTHOJIT_CUBLASLT_LIBRARY", "/opt/wheel/nvidia/cu13/lib/libcublasLt.so.13", 1);
  EXPECT_EQ(CublasLtNewtonSchulz::library_candidates().front(), "/opt/wheel/nvidia/cu13/lib/libcublasLt.so.13");
  unsetenv("ORTHOJIT_CUBLASLT_LIBRARY");
#endif

  // On a machine whose driver is unusable (the toolkit's placeholder libcuda, no GPU): the reason names the driver's
  // problem or the library's, and constructing the baseline throws it instead of crashing.
  std::string driver_reason;
  if (!driver(&driver_reason)) {
    const std::string reason = CublasLtNewtonSchulz::unavailable_reason();
    ASSERT_FALSE(reason.empty());
    if (CublasLtNewtonSchulz::library_reason().empty()) {
      EXPECT_NE(reason.find(driver_reason), std::string::npos) << reason;
    }
    try {
      CublasLtNewtonSchulz baseline(1, 64, 128, ScalarType::BF16, standard_lt_schedule(64, 128, kJordan), {}, kernels::cuda_device_headers());
      FAIL() << "constructed without a device";
    } catch (const std::runtime_error& error) {
      EXPECT_EQ(std::string(error.what()), reason);
    }
    EXPECT_THROW(build_cuda_runner(program, gram, CudaVariant::parse("cublaslt"), kernels::cuda_device_headers()), std::runtime_error);
  }
}

}  // namespace
}  // namespace orthojit::cuda
