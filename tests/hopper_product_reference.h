// The f64 check of one sm_90a product tile's result (tests/cuda_device_hopper_products.cpp), on
// the host and on every core: D = α·A·B + β·C + γ·I from the same bf16 values, each element within
// its own bound. Written apart from the device code so that a host test can plant errors in D.
// The largest device case (2048x8192, K 512) is 8.6e9 multiply-adds: single-threaded, the checks of
// all eight cases took tens of seconds of the device lease, spread over the cores a few.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orthojit::device_test {

struct ProductProblem {
  int64_t m = 0, n = 0, k = 0;
  bool b_mn_major = false;  // B stored k x n (row-major); false: as Bᵀ, n x k
  float alpha = 1, beta = 0, gamma = 0;
};

struct ProductCheck {
  double worst = 0;      // the largest error / bound over the elements
  int64_t bad = 0;       // elements beyond their bound (or not finite)
  int64_t red_zone = 0;  // columns n..ldd of D that were written (they stay poisoned: 0xff bytes)
  std::string first_bad;  // the first bad element in row-major order: "D(i, j) = got, f64 reference"
};

// a: m x k bf16 bits; b: as b_mn_major says; c: m rows of ldc bf16 bits (read only when β != 0);
// d: m rows of ldd elements, f32 when f32_d, else bf16 bits, columns n..ldd expected poisoned.
// threads: 0 for every core. The result does not depend on the number of threads.
ProductCheck check_product_against_f64(const ProductProblem& p, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                                       const std::vector<uint16_t>& c, int64_t ldc, const unsigned char* d, int64_t ldd, bool f32_d, unsigned threads = 0);

}  // namespace orthojit::device_test
