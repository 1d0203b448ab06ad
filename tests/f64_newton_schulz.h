// Newton–Schulz in plain float64, written independently of the compiler, for the optimizer tests'
// re-implementations of each system's Muon step (tests/hybrid_optimizer_test.cpp,
// tests/preset_fidelity_test.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace orthojit::testing {

// X ← a·X + (b·A + c·A²)·X, A = X·Xᵀ, after X = G / (‖G‖ + eps) (or / max(‖G‖, eps)); a tall G
// is worked on transposed. Plain f64, written independently of the compiler.
inline std::vector<double> newton_schulz(const std::vector<double>& g, int64_t rows, int64_t cols, const std::vector<std::array<double, 3>>& steps, double eps, bool clamp) {
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  std::vector<double> x(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[static_cast<size_t>(tall ? j * rows + i : i * cols + j)] = g[static_cast<size_t>(i * cols + j)];
  double norm = 0;
  for (double v : x) norm += v * v;
  norm = std::sqrt(norm);
  const double denominator = clamp ? std::max(norm, eps) : norm + eps;
  for (double& v : x) v /= denominator;
  for (const auto& [a, b, c] : steps) {
    std::vector<double> gram(static_cast<size_t>(m * m), 0.0), poly(static_cast<size_t>(m * m), 0.0), next(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j)
        for (int64_t k = 0; k < n; ++k) gram[static_cast<size_t>(i * m + j)] += x[static_cast<size_t>(i * n + k)] * x[static_cast<size_t>(j * n + k)];
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double square = 0;
        for (int64_t k = 0; k < m; ++k) square += gram[static_cast<size_t>(i * m + k)] * gram[static_cast<size_t>(k * m + j)];
        poly[static_cast<size_t>(i * m + j)] = b * gram[static_cast<size_t>(i * m + j)] + c * square;
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = a * x[static_cast<size_t>(i * n + j)];
        for (int64_t k = 0; k < m; ++k) sum += poly[static_cast<size_t>(i * m + k)] * x[static_cast<size_t>(k * n + j)];
        next[static_cast<size_t>(i * n + j)] = sum;
      }
    x = next;
  }
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[static_cast<size_t>(i * cols + j)] = x[static_cast<size_t>(tall ? j * rows + i : i * cols + j)];
  return out;
}


}  // namespace orthojit::testing
