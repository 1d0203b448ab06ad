// Reference checks (see reference_check.h).
#include "autotune/reference_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "autotune/f64_products.h"
#include "reference/interpreter.h"

namespace orthojit::autotune {
namespace {

// The f64 products of the reference through OpenBLAS dgemm, or a portable loop in a build without
// it (autotune/f64_products.h): an implementation independent of the kernels being checked.
void blas_products(int64_t m, int64_t n, int64_t k, const double* a, const double* b_t, double* sums) { f64_products(m, n, k, a, b_t, sums); }

}  // namespace

double iteration_flops(const ir::Function& function) {
  const double m = static_cast<double>(std::min(function.input_shape.rows.size, function.input_shape.cols.size));
  const double n = static_cast<double>(std::max(function.input_shape.rows.size, function.input_shape.cols.size));
  return static_cast<double>(function.steps.size()) * (4 * m * m * n + 2 * m * m * m);
}

// Why a sample of a large batch is enough. Every matrix of a batch runs the same kernels with the
// same tiles; what differs between matrices is only how the batch index enters: a base offset or
// stride (wrong from matrix 1 on, so any checked matrix after the first sees it), the batch's
// bounds and its split over threads or the grid's z dimension (an off-by-one, a chunk boundary or
// a grid limit leaves the last matrix, or every matrix past some index, wrong or unwritten: the
// last is always checked), and per-matrix reductions such as the normalization's partial sums (a
// slip there mixes neighbouring matrices, the second's and the last's included). The sample holds
// the first and the last and, evenly spaced between them, as many as the reference budget allows:
// every matrix of the per-head and small expert batches the tuner meets (36 heads of 64x768 cost
// 2.4e9 FLOPs in all), two of 64 experts of 1408x2048 (1.1e11 each). Every element of the whole
// batch is still checked for being written and finite (the output is poisoned with NaN before the
// run), so an unwritten matrix anywhere is caught. What a sample cannot see is an error confined
// to one interior matrix that nothing structural ties to the ends (a race, say); no deterministic
// sample could.
std::vector<int64_t> checked_matrices(int64_t batch, double flops_per_matrix) {
  int64_t count = batch;
  if (static_cast<double>(batch) * flops_per_matrix > kFullCheckFlops)
    count = std::clamp<int64_t>(static_cast<int64_t>(kFullCheckFlops / std::max(flops_per_matrix, 1.0)), 2, batch);
  std::vector<int64_t> matrices;
  for (int64_t i = 0; i < count; ++i)
    matrices.push_back(count == 1 ? 0 : static_cast<int64_t>(std::llround(static_cast<double>(i) * static_cast<double>(batch - 1) / static_cast<double>(count - 1))));
  matrices.erase(std::unique(matrices.begin(), matrices.end()), matrices.end());
  return matrices;
}

Reference reference_of(const ir::Function& function, const std::vector<float>& input) {
  const int64_t per_matrix = function.input_shape.elements();
  ir::Function one = function;
  one.batch = 1;
  Reference reference;
  reference.rows = function.input_shape.rows.size;
  reference.cols = function.input_shape.cols.size;
  reference.matrices = checked_matrices(function.batch, iteration_flops(function));
  reference.bounds = error_bounds(function);
  reference.values.reserve(static_cast<size_t>(per_matrix) * reference.matrices.size());
  for (int64_t z : reference.matrices) {
    const std::vector<double> matrix(input.begin() + z * per_matrix, input.begin() + (z + 1) * per_matrix);
    const std::vector<double> output = reference::interpret(one, matrix, blas_products);
    reference.values.insert(reference.values.end(), output.begin(), output.end());
  }
  return reference;
}

CheckResult compare(const std::vector<float>& output, const Reference& reference) {
  const int64_t per_matrix = reference.rows * reference.cols;
  if (reference.matrices.empty() || static_cast<int64_t>(output.size()) < (reference.matrices.back() + 1) * per_matrix)
    throw std::invalid_argument("compare: the output holds fewer matrices than the reference was computed for");
  std::vector<float> checked;
  checked.reserve(reference.values.size());
  for (int64_t z : reference.matrices) checked.insert(checked.end(), output.begin() + z * per_matrix, output.begin() + (z + 1) * per_matrix);
  CheckResult result;
  // Every element of the batch must be written and finite, the unchecked matrices' too.
  for (size_t e = 0; e < output.size(); ++e)
    if (!std::isfinite(output[e])) {
      result.measure.finite = false;
      result.measure.tile = result.measure.frobenius = result.error = std::numeric_limits<double>::infinity();
      result.measure.tile_matrix = result.measure.frobenius_matrix = static_cast<int64_t>(e) / std::max<int64_t>(per_matrix, 1);
      result.message = "non-finite or unwritten output (matrix " + std::to_string(result.measure.tile_matrix) + ")";
      return result;
    }
  result.measure = measure_error(checked.data(), reference.values.data(), reference.rows, reference.cols, static_cast<int64_t>(reference.matrices.size()));
  // Report the batch index, not the position among the checked matrices.
  result.measure.tile_matrix = reference.matrices[static_cast<size_t>(result.measure.tile_matrix)];
  result.measure.frobenius_matrix = reference.matrices[static_cast<size_t>(result.measure.frobenius_matrix)];
  result.error = result.measure.tile;
  result.ok = within(result.measure, reference.bounds);
  if (!result.ok) result.message = describe_violation(result.measure, reference.bounds, reference.rows, reference.cols) + " against the f64 reference";
  return result;
}

CheckResult check_against_reference(const ir::Function& function, const std::vector<float>& input, const std::vector<float>& output) {
  return compare(output, reference_of(function, input));
}

void reduced_check_shape(int64_t rows, int64_t cols, int64_t& small_rows, int64_t& small_cols) {
  small_rows = std::min<int64_t>(rows, rows <= cols ? 192 : 768);
  small_cols = std::min<int64_t>(cols, rows <= cols ? 768 : 192);
}

}  // namespace orthojit::autotune
