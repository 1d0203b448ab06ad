// Checking a candidate's output against the float64 reference interpreter (shared by the CPU and
// CUDA tuners). The reference's products go through OpenBLAS dgemm: an implementation
// independent of the kernels being checked, and fast enough to check large shapes in seconds.
#pragma once

#include <string>
#include <vector>

#include "ir/function.h"

namespace orthojit::autotune {

// Above this many f64 FLOPs the reference of the full shape is not computed (it would take longer
// than tuning): the candidate's configuration is then checked on a reduced shape instead, and its
// full-shape output only for being finite.
inline constexpr double kFullCheckFlops = 2.5e11;

// Dense-equivalent FLOPs of the standard iteration, per matrix (the reference's cost scale).
double iteration_flops(const ir::Function& function);

double relative_error(const std::vector<float>& candidate, const std::vector<double>& reference);

struct CheckResult {
  bool ok = false;
  double error = 0;
  std::string message;
};

// The f64 reference of `function` on the first matrix of `input`.
std::vector<double> reference_of(const ir::Function& function, const std::vector<float>& input);

// The first matrix of `output` against `reference`.
CheckResult compare(const std::vector<float>& output, const std::vector<double>& reference, double tolerance);

CheckResult check_against_reference(const ir::Function& function, const std::vector<float>& input, const std::vector<float>& output, double tolerance);

// The reduced shape a large problem's configuration is checked on (same orientation).
void reduced_check_shape(int64_t rows, int64_t cols, int64_t& small_rows, int64_t& small_cols);

}  // namespace orthojit::autotune
