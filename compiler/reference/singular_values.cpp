// One-sided Jacobi SVD: rotate pairs of rows of the wide orientation until all rows are mutually
// orthogonal; the row norms are then the singular values.
#include "reference/singular_values.h"

#include <algorithm>
#include <cmath>

namespace orthojit::reference {

std::vector<double> singular_values(const std::vector<double>& matrix, int64_t rows, int64_t cols) {
  // Work on the orientation with fewer rows (m <= n): rotations act on m vectors of length n.
  const bool transpose = rows > cols;
  const int64_t m = transpose ? cols : rows, n = transpose ? rows : cols;
  std::vector<double> w(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) w[static_cast<size_t>(transpose ? j * n + i : i * n + j)] = matrix[static_cast<size_t>(i * cols + j)];
  auto row = [&](int64_t i) { return &w[static_cast<size_t>(i * n)]; };
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0.0;
    for (int64_t p = 0; p < m; ++p) {
      for (int64_t q = p + 1; q < m; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        const double *rp = row(p), *rq = row(q);
        for (int64_t k = 0; k < n; ++k) {
          alpha += rp[k] * rp[k];
          beta += rq[k] * rq[k];
          gamma += rp[k] * rq[k];
        }
        if (gamma == 0.0 || std::fabs(gamma) <= 1e-15 * std::sqrt(alpha * beta)) continue;
        off = std::max(off, std::fabs(gamma) / std::sqrt(alpha * beta));
        const double zeta = (beta - alpha) / (2.0 * gamma);
        const double t = std::copysign(1.0, zeta) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
        const double cs = 1.0 / std::sqrt(1.0 + t * t), sn = cs * t;
        double *wp = row(p), *wq = row(q);
        for (int64_t k = 0; k < n; ++k) {
          const double x = wp[k], y = wq[k];
          wp[k] = cs * x - sn * y;
          wq[k] = sn * x + cs * y;
        }
      }
    }
    if (off < 1e-15) break;
  }
  std::vector<double> values(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += row(i)[k] * row(i)[k];
    values[static_cast<size_t>(i)] = std::sqrt(sum);
  }
  std::sort(values.rbegin(), values.rend());
  return values;
}

}  // namespace orthojit::reference
