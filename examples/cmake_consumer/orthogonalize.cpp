// Orthogonalizes a random 48 x 160 matrix with an installed orthojit (C++ runtime) and checks
// the result against what Newton-Schulz promises: Jordan's quintic leaves the singular values of
// O = NS(X) in about [0.7, 1.2], so O·Oᵀ = U·diag(σ²)·Uᵀ has its diagonal in [0.49, 1.44] (within
// 0.6 of 1) and its off-diagonal entries below (1.44 − 0.49)/2 < 0.5. Exits 1 otherwise.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/program_library.h"
#include "runtime/orthogonalize.h"
#include "runtime/package_version.h"

int main() {
  const int64_t rows = 48, cols = 160;
  std::mt19937 random(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> x(static_cast<size_t>(rows * cols));
  for (double& v : x) v = normal(random);
  orthojit::runtime::OrthogonalizeOptions options;
  options.backend = "auto";
  const auto program = orthojit::kernels::load_program_by_name_or_path("jordan_ns5");
  const auto result = orthojit::runtime::orthogonalize(program, x, 1, rows, cols, options);
  // The diagonal of O·Oᵀ is the squared norm of each row; off the diagonal, near 0.
  double worst_diagonal = 0, worst_off = 0;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < rows; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < cols; ++k) dot += result.values[static_cast<size_t>(i * cols + k)] * result.values[static_cast<size_t>(j * cols + k)];
      if (i == j) worst_diagonal = std::max(worst_diagonal, std::fabs(dot - 1.0));
      else worst_off = std::max(worst_off, std::fabs(dot));
    }
  std::printf("orthojit %s: O = NS(X) for 48x160 on %s, |diag(O·Oᵀ) - 1| <= %.3f, |off-diagonal| <= %.3f\n", orthojit::package_version(),
              result.strategy_reason.c_str(), worst_diagonal, worst_off);
  return worst_diagonal < 0.6 && worst_off < 0.5 ? 0 : 1;
}
