// The f64 products of the reference checks (autotune/f64_products.h): the portable fallback of
// builds without OpenBLAS, and whatever f64_products dispatches to in this build, against the
// plain exact-order sum, on shapes that are not multiples of the 4x4 blocks or the k chunks and
// on one large enough to run on several threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "autotune/f64_products.h"
#include "reference/random_matrix.h"

namespace orthojit::autotune {
namespace {

using Shapes = std::vector<std::tuple<int64_t, int64_t, int64_t>>;

std::vector<double> naive(int64_t m, int64_t n, int64_t k, const std::vector<double>& a, const std::vector<double>& b_t) {
  std::vector<double> sums(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += a[static_cast<size_t>(i * k + p)] * b_t[static_cast<size_t>(j * k + p)];
      sums[static_cast<size_t>(i * n + j)] = sum;
    }
  return sums;
}

// Only the order of the f64 sums differs: |Δ| <= k·u·Σ|a||b| (u = 2^-53), with room for the
// blocked order; Σ|a||b| is at most k for these N(0,1) values times a few, so 1e-12·k bounds it.
void expect_close(int64_t m, int64_t n, int64_t k, bool portable) {
  const std::vector<double> a = reference::gaussian_values(m * k, 11), b_t = reference::gaussian_values(n * k, 12);
  std::vector<double> sums(static_cast<size_t>(m * n), std::nan(""));
  if (portable) portable_f64_products(m, n, k, a.data(), b_t.data(), sums.data());
  else f64_products(m, n, k, a.data(), b_t.data(), sums.data());
  const std::vector<double> expected = naive(m, n, k, a, b_t);
  double worst = 0;
  for (size_t e = 0; e < expected.size(); ++e) worst = std::max(worst, std::fabs(sums[e] - expected[e]));
  EXPECT_LE(worst, 1e-12 * static_cast<double>(k)) << m << "x" << n << "x" << k << (portable ? " portable" : " dispatched");
}

TEST(F64Products, PortableMatchesTheExactOrderSumOnRaggedShapes) {
  for (auto [m, n, k] : Shapes{{1, 1, 1}, {3, 5, 7}, {4, 4, 256}, {7, 66, 300}, {65, 9, 513}, {130, 130, 40}}) expect_close(m, n, k, true);
}

TEST(F64Products, PortableOnSeveralThreads) { expect_close(203, 190, 600, true); }

TEST(F64Products, DispatchedMatchesTheExactOrderSum) {
  for (auto [m, n, k] : Shapes{{3, 5, 7}, {65, 9, 513}, {203, 190, 600}}) expect_close(m, n, k, false);
}

}  // namespace
}  // namespace orthojit::autotune
