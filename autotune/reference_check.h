// Checking a candidate's output against the float64 reference interpreter (shared by the CPU and
// CUDA tuners). The reference's products go through OpenBLAS dgemm: an implementation
// independent of the kernels being checked, and fast enough to check large shapes in seconds.
// Outputs are judged by autotune/error_measure.h (per 16x16 tile and per matrix), on every matrix
// of a batch or, for large batches, on a deterministic sample (checked_matrices).
#pragma once

#include <string>
#include <vector>

#include "autotune/error_measure.h"
#include "ir/function.h"

namespace orthojit::autotune {

// Above this many f64 FLOPs the reference of the full shape is not computed (it would take longer
// than tuning): the candidate's configuration is then checked on a reduced shape instead, and its
// full-shape output only for being finite. It is also the budget of a batch's reference: see
// checked_matrices.
inline constexpr double kFullCheckFlops = 2.5e11;

// Dense-equivalent FLOPs of the standard iteration, per matrix (the reference's cost scale).
double iteration_flops(const ir::Function& function);

// Which matrices of a batch of `batch` the reference is computed for and the candidate compared
// on, ascending: all of them while their reference costs at most kFullCheckFlops together;
// otherwise as many as fit (at least two), evenly spaced from the first to the last.
std::vector<int64_t> checked_matrices(int64_t batch, double flops_per_matrix);

// The f64 reference of some matrices of a batch.
struct Reference {
  int64_t rows = 0, cols = 0;     // the user's shape (the output's)
  std::vector<int64_t> matrices;  // indices into the batch, ascending
  std::vector<double> values;     // their outputs, one after the other
  ErrorBounds bounds;             // what a correct output of this function stays within
};

// The f64 reference of `function` on the checked_matrices of `input`.
Reference reference_of(const ir::Function& function, const std::vector<float>& input);

struct CheckResult {
  bool ok = false;
  double error = 0;  // the tile measure (error_measure.h) of the worst checked matrix
  ErrorMeasure measure;
  std::string message;
};

// The reference's matrices of `output` (the whole batch) against it.
CheckResult compare(const std::vector<float>& output, const Reference& reference);

CheckResult check_against_reference(const ir::Function& function, const std::vector<float>& input, const std::vector<float>& output);

// The reduced shape a large problem's configuration is checked on (same orientation).
void reduced_check_shape(int64_t rows, int64_t cols, int64_t& small_rows, int64_t& small_cols);

}  // namespace orthojit::autotune
