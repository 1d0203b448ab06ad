// f64 products for the reference checks (see f64_products.h).
#include "autotune/f64_products.h"

#ifdef ORTHOJIT_HAVE_VENDOR_BLAS
#include "cpu/openblas_library.h"
#endif

#include <algorithm>
#include <thread>
#include <vector>

namespace orthojit::autotune {
namespace {

// Rows [row_begin, row_end) of the result. Blocks of 4x4 outputs with 16 independent accumulators
// (GCC does not reorder a single f64 sum without -ffast-math, so one accumulator per output would
// be latency-bound); k in chunks of kKc and the columns in chunks of kNc so a chunk of b_t's rows
// stays in L2 while every row block of this thread passes over it.
void product_rows(int64_t row_begin, int64_t row_end, int64_t n, int64_t k, const double* a, const double* b_t, double* sums) {
  constexpr int64_t kKc = 256, kNc = 64;
  for (int64_t i = row_begin; i < row_end; ++i) std::fill(sums + i * n, sums + (i + 1) * n, 0.0);
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t k1 = std::min(k, k0 + kKc);
    for (int64_t j0 = 0; j0 < n; j0 += kNc) {
      const int64_t j1 = std::min(n, j0 + kNc);
      for (int64_t i = row_begin; i < row_end; i += 4) {
        const int64_t rows = std::min<int64_t>(4, row_end - i);
        for (int64_t j = j0; j < j1; j += 4) {
          const int64_t cols = std::min<int64_t>(4, j1 - j);
          if (rows == 4 && cols == 4) {
            double acc[4][4] = {};
            const double* a_rows[4] = {a + i * k, a + (i + 1) * k, a + (i + 2) * k, a + (i + 3) * k};
            const double* b_rows[4] = {b_t + j * k, b_t + (j + 1) * k, b_t + (j + 2) * k, b_t + (j + 3) * k};
            for (int64_t p = k0; p < k1; ++p)
              for (int r = 0; r < 4; ++r)
                for (int c = 0; c < 4; ++c) acc[r][c] += a_rows[r][p] * b_rows[c][p];
            for (int r = 0; r < 4; ++r)
              for (int c = 0; c < 4; ++c) sums[(i + r) * n + j + c] += acc[r][c];
          } else {
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = 0; c < cols; ++c) {
                double acc = 0;
                for (int64_t p = k0; p < k1; ++p) acc += a[(i + r) * k + p] * b_t[(j + c) * k + p];
                sums[(i + r) * n + j + c] += acc;
              }
          }
        }
      }
    }
  }
}

}  // namespace

void portable_f64_products(int64_t m, int64_t n, int64_t k, const double* a, const double* b_t, double* sums) {
  // Own threads rather than the shared pool: a check may itself run inside a pool job, and a job
  // must not wait on its own pool. Below ~4 MFLOP per thread the threads cost more than they save.
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::clamp<int64_t>(static_cast<int64_t>(flops / 4e6), 1, std::min<int64_t>(hardware, (m + 3) / 4));
  if (threads <= 1) {
    product_rows(0, m, n, k, a, b_t, sums);
    return;
  }
  const int64_t per_thread = (m + threads - 1) / threads;
  std::vector<std::thread> workers;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * per_thread, end = std::min(m, begin + per_thread);
    if (begin < end) workers.emplace_back(product_rows, begin, end, n, k, a, b_t, sums);
  }
  for (auto& worker : workers) worker.join();
}

void f64_products(int64_t m, int64_t n, int64_t k, const double* a, const double* b_t, double* sums) {
#ifdef ORTHOJIT_HAVE_VENDOR_BLAS
  // The portable loop too when the library cannot be opened at run time (cpu/openblas_library.h).
  if (cpu::openblas_unavailable_reason().empty()) {
    cpu::openblas_dgemm_nt(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), a, b_t, sums);
    return;
  }
#endif
  portable_f64_products(m, n, k, a, b_t, sums);
}

}  // namespace orthojit::autotune
