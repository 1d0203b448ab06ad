// Inputs at the edges of the floating-point range, on every backend this build runs here, against
// independent expectations:
//   * scale invariance: orthogonalization does not depend on the input's scale once eps is
//     negligible, so NS(c·X) for c = 1e18 and 1e30 (Σx² overflows f32 at 64 x 256) must equal
//     NS(X) to f32 rounding, elementwise (before the robust norm the cpu backend returned zeros);
//   * a matrix of 1e-30 (its norm far below eps): the result is the eps-dominated value the
//     interpreter computes, finite; zero in, zero out;
//   * f16 storage with values beyond f16's range (65504) before normalization: finite and equal
//     to NS of the scaled-down input;
//   * the bits in the ordinary range are unchanged by the scaling (the cpu backend's output is
//     compared with an explicit reference of the unscaled arithmetic elsewhere: cpu_backend_test);
//   * 1 x N and N x 1, and shapes at the tiling remainders: finite, the interpreter's values;
//   * NaN and infinity in the input, and finite f64 values beyond float's range for an f32
//     backend: a UsageError naming the element, before anything runs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/program_library.h"
#include "reference/random_matrix.h"
#include "runtime/input_check.h"
#include "runtime/orthogonalize.h"

namespace orthojit {
namespace {

std::vector<std::string> backends_here() {
  std::vector<std::string> names = {"ref"};
  for (const std::string& name : runtime::available_backends())
    if (name == "cpu") names.push_back("cpu");
  return names;
}

std::vector<double> run(const std::string& program_name, const std::vector<double>& input, int64_t rows, int64_t cols, const std::string& backend,
                        const std::string& strategy = "standard") {
  const dsl::Program program = kernels::load_program_by_name_or_path(program_name);
  runtime::OrthogonalizeOptions options;
  options.backend = backend;
  options.strategy = strategy;
  options.use_tuning_records = false;
  return runtime::orthogonalize(program, input, 1, rows, cols, options).values;
}

// The largest elementwise difference relative to the largest |expected|: one bad tile shows.
double elementwise_error(const std::vector<double>& got, const std::vector<double>& expected) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::fabs(got[i] - expected[i]));
    scale = std::max(scale, std::fabs(expected[i]));
  }
  return worst / std::max(scale, 1e-300);
}

std::vector<double> scaled(std::vector<double> x, double c) {
  for (double& v : x) v *= c;
  return x;
}

TEST(EdgeInputs, HugeAndSmallScalesGiveTheUnscaledResult) {
  const int64_t rows = 64, cols = 256;
  const std::vector<double> x = reference::gaussian_values(rows * cols, 91);
  for (const std::string& backend : backends_here())
    for (const char* program : {"jordan_ns5", "polar_express5"}) {
      const std::vector<double> expected = run(program, x, rows, cols, backend);
      for (double c : {1e18, 1e30}) {
        SCOPED_TRACE(backend + " " + program + " scaled by " + std::to_string(c));
        // Both programs store bf16: c·x rounds to f32 a little differently from x, so after the
        // normalization an element near a bf16 rounding boundary may land one bf16 unit (2^-8 of
        // its magnitude) away, and five steps amplify that a few times: 1.5e-2 of the largest
        // element. A wrong norm (zeros, NaN, an unnormalized X) is off by O(1).
        EXPECT_LT(elementwise_error(run(program, scaled(x, c), rows, cols, backend), expected), 1.5e-2);
      }
    }
}

TEST(EdgeInputs, ZeroAndTinyMatricesAreFiniteAndAgreeWithTheInterpreter) {
  const int64_t rows = 16, cols = 40;
  const std::vector<double> zeros(static_cast<size_t>(rows * cols), 0.0);
  const std::vector<double> tiny = scaled(reference::gaussian_values(rows * cols, 5), 1e-30);
  const std::vector<double> reference_tiny = run("jordan_ns5", tiny, rows, cols, "ref");
  for (const std::string& backend : backends_here()) {
    SCOPED_TRACE(backend);
    for (double v : run("jordan_ns5", zeros, rows, cols, backend)) ASSERT_EQ(v, 0.0);
    const std::vector<double> result = run("jordan_ns5", tiny, rows, cols, backend);
    EXPECT_LT(elementwise_error(result, reference_tiny), 2e-2);
    double largest = 0;
    for (double v : result) largest = std::max(largest, std::fabs(v));
    EXPECT_GT(largest, 0.0) << "a 1e-30 matrix came back as zeros";
  }
}

TEST(EdgeInputs, SixteenBitStorageNormalizesBeforeItRounds) {
  // gram_polar_express5 stores f16: 1e6 is beyond f16's 65504, but only before normalization.
  const int64_t rows = 32, cols = 96;
  const std::vector<double> x = reference::gaussian_values(rows * cols, 17);
  for (const std::string& backend : backends_here()) {
    SCOPED_TRACE(backend);
    const std::vector<double> expected = run("gram_polar_express5", x, rows, cols, backend, "gram");
    EXPECT_LT(elementwise_error(run("gram_polar_express5", scaled(x, 1e6), rows, cols, backend, "gram"), expected), 3e-2);  // f16: 2^-11 units
  }
}

TEST(EdgeInputs, VectorsAndRemainderShapesAreFinite) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 300}, {300, 1}, {1, 1}, {17, 33}, {129, 65}}) {
    const std::vector<double> x = reference::gaussian_values(rows * cols, static_cast<uint64_t>(rows * 1000 + cols));
    const std::vector<double> expected = run("jordan_ns5", x, rows, cols, "ref");
    for (const std::string& backend : backends_here()) {
      SCOPED_TRACE(backend + " " + std::to_string(rows) + "x" + std::to_string(cols));
      EXPECT_LT(elementwise_error(run("jordan_ns5", x, rows, cols, backend), expected), 2e-2);
    }
  }
}

TEST(EdgeInputs, NonFiniteInputIsRefusedNamingTheElement) {
  std::vector<double> x = reference::gaussian_values(2 * 3 * 4, 3);
  EXPECT_NO_THROW(runtime::require_finite_input(x.data(), 2, 3, 4, true, "x"));
  x[1 * 12 + 2 * 4 + 3] = std::nan("");
  try {
    runtime::require_finite_input(x.data(), 2, 3, 4, false, "x");
    FAIL() << "a NaN was accepted";
  } catch (const runtime::UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("element (1, 2, 3) is nan"), std::string::npos) << error.what();
  }
  x[1 * 12 + 2 * 4 + 3] = 1.0;
  x[5] = -HUGE_VAL;
  EXPECT_THROW(runtime::require_finite_input(x.data(), 2, 3, 4, false, "x"), runtime::UsageError);
  x[5] = 1e39;  // finite in f64, infinite once read as f32
  EXPECT_NO_THROW(runtime::require_finite_input(x.data(), 2, 3, 4, false, "x"));
  EXPECT_THROW(runtime::require_finite_input(x.data(), 2, 3, 4, true, "x"), runtime::UsageError);
  const std::vector<float> f = {1.0f, std::numeric_limits<float>::infinity()};
  EXPECT_THROW(runtime::require_finite_input(f.data(), 1, 1, 2, "x"), runtime::UsageError);
}

}  // namespace
}  // namespace orthojit
