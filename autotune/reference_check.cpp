// Reference checks (see reference_check.h).
#include "autotune/reference_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "autotune/f64_products.h"
#include "reference/interpreter.h"

namespace orthojit::autotune {
namespace {

// The f64 products of the reference through OpenBLAS dgemm, or a portable loop in a build without
// it (autotune/f64_products.h): an implementation independent of the kernels being checked.
void blas_products(int64_t m, int64_t n, int64_t k, const double* a, const double* b_t, double* sums) { f64_products(m, n, k, a, b_t, sums); }

}  // namespace

double relative_error(const std::vector<float>& candidate, const std::vector<double>& reference) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double delta = static_cast<double>(candidate[i]) - reference[i];
    difference += delta * delta;
    norm += reference[i] * reference[i];
  }
  return std::sqrt(difference / std::max(norm, 1e-300));
}

double iteration_flops(const ir::Function& function) {
  const double m = static_cast<double>(std::min(function.input_shape.rows.size, function.input_shape.cols.size));
  const double n = static_cast<double>(std::max(function.input_shape.rows.size, function.input_shape.cols.size));
  return static_cast<double>(function.steps.size()) * (4 * m * m * n + 2 * m * m * m);
}

std::vector<double> reference_of(const ir::Function& function, const std::vector<float>& input) {
  const int64_t per_matrix = function.input_shape.elements();
  ir::Function one = function;
  one.batch = 1;
  const std::vector<double> first(input.begin(), input.begin() + per_matrix);
  return reference::interpret(one, first, blas_products);
}

CheckResult compare(const std::vector<float>& output, const std::vector<double>& reference, double tolerance) {
  const std::vector<float> candidate(output.begin(), output.begin() + static_cast<int64_t>(reference.size()));
  CheckResult result;
  result.error = relative_error(candidate, reference);
  result.ok = result.error <= tolerance;
  if (!result.ok) {
    char text[160];
    std::snprintf(text, sizeof text, "relative error %.3g against the f64 reference exceeds %.3g", result.error, tolerance);
    result.message = text;
  }
  return result;
}

CheckResult check_against_reference(const ir::Function& function, const std::vector<float>& input, const std::vector<float>& output,
                                    double tolerance) {
  return compare(output, reference_of(function, input), tolerance);
}

void reduced_check_shape(int64_t rows, int64_t cols, int64_t& small_rows, int64_t& small_cols) {
  small_rows = std::min<int64_t>(rows, rows <= cols ? 192 : 768);
  small_cols = std::min<int64_t>(cols, rows <= cols ? 768 : 192);
}

}  // namespace orthojit::autotune
