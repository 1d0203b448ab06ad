// The f64 check of an sm_90a product tile's result (hopper_product_reference.h).
#include "hopper_product_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "support/bf16_bits.h"

namespace orthojit::device_test {

ProductCheck check_product_against_f64(const ProductProblem& p, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                                       const std::vector<uint16_t>& c, int64_t ldc, const unsigned char* d, int64_t ldd, bool f32_d, unsigned threads) {
  // The operands as doubles (exact: bf16 values), B with its k values contiguous per column j, so
  // that every dot product walks two rows in memory order whichever layout B has on the device.
  std::vector<double> a64(a.size()), bt(static_cast<size_t>(p.n * p.k));
  for (size_t i = 0; i < a.size(); ++i) a64[i] = bf16_value(a[i]);
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t kk = 0; kk < p.k; ++kk)
      bt[static_cast<size_t>(j * p.k + kk)] = bf16_value(p.b_mn_major ? b[static_cast<size_t>(kk * p.n + j)] : b[static_cast<size_t>(j * p.k + kk)]);
  // Per row, so that the rows can be checked in any order and combined in row order after.
  std::vector<ProductCheck> rows(static_cast<size_t>(p.m));
  auto check_row = [&](int64_t i) {
    ProductCheck& row = rows[static_cast<size_t>(i)];
    const double* const ai = a64.data() + i * p.k;
    for (int64_t j = 0; j < ldd; ++j) {
      const size_t at = static_cast<size_t>(i * ldd + j);
      double got;
      bool poisoned;
      if (f32_d) {
        float value;
        uint32_t raw;
        std::memcpy(&value, d + at * 4, 4);
        std::memcpy(&raw, d + at * 4, 4);
        got = value, poisoned = raw == 0xffffffffu;
      } else {
        uint16_t bits;
        std::memcpy(&bits, d + at * 2, 2);
        got = bf16_value(bits), poisoned = bits == 0xffff;
      }
      if (j >= p.n) {
        row.red_zone += !poisoned;
        continue;
      }
      const double* const bj = bt.data() + j * p.k;
      double exact = 0, magnitude = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double product = ai[kk] * bj[kk];
        exact += product;
        magnitude += std::fabs(product);
      }
      const double cij = p.beta != 0 ? bf16_value(c[static_cast<size_t>(i * ldc + j)]) : 0.0;
      const double reference = p.alpha * exact + p.beta * cij + (i == j ? p.gamma : 0.0);
      // f32 accumulation of k products in an order of the hardware's (4k·2⁻²⁴·Σ|ab|, twice the
      // sequential bound), the epilogue, and D's rounding (half an ulp of bf16 or f32).
      const double bound = 4.0 * static_cast<double>(p.k) * std::ldexp(1.0, -24) *
                               (std::fabs(p.alpha) * magnitude + std::fabs(p.beta * cij) + std::fabs(p.gamma)) +
                           (f32_d ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8)) * std::fabs(reference) + 1e-30;
      const double error = std::isfinite(got) ? std::fabs(got - reference) : INFINITY;
      row.worst = std::max(row.worst, error / bound);
      if (error > bound && row.bad++ == 0)
        row.first_bad = "D(" + std::to_string(i) + ", " + std::to_string(j) + ") = " + std::to_string(got) + ", f64 " + std::to_string(reference);
    }
  };
  const unsigned workers = std::max(1u, std::min<unsigned>(threads ? threads : std::thread::hardware_concurrency(), static_cast<unsigned>(std::max<int64_t>(1, p.m))));
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int64_t i = w; i < p.m; i += workers) check_row(i);
    });
  for (std::thread& t : pool) t.join();
  ProductCheck total;
  for (const ProductCheck& row : rows) {
    total.worst = std::max(total.worst, row.worst);
    if (row.bad > 0 && total.bad == 0) total.first_bad = row.first_bad;
    total.bad += row.bad;
    total.red_zone += row.red_zone;
  }
  return total;
}

}  // namespace orthojit::device_test
