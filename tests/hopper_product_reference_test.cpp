// The f64 check of the sm_90a product tile's results (hopper_product_reference.h), which
// cuda_device_test runs on a device's output: here on a D made on the host, correct to the
// rounding the tile has (f32 accumulation, one rounding to D's type), then with planted errors.
// Its verdict and its first bad element must not depend on the number of threads.
#include "hopper_product_reference.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "support/bf16_bits.h"

namespace orthojit::device_test {
namespace {

struct Made {
  ProductProblem p;
  std::vector<uint16_t> a, b, c;
  int64_t ldc = 0, ldd = 0;
  bool f32_d = false;
  std::vector<unsigned char> d;
};

// D as the tile would write it: each element accumulated in f32 in k order, the epilogue in f32,
// one rounding to D's type; the columns from n to ldd poisoned (0xff bytes).
Made make(const ProductProblem& p, bool f32_d, unsigned seed) {
  Made made{p, {}, {}, {}, (p.n + 7) / 8 * 8, 0, f32_d, {}};
  made.ldd = made.ldc + 8;
  std::mt19937 random(seed);
  std::normal_distribution<float> gaussian;
  made.a.resize(static_cast<size_t>(p.m * p.k));
  made.b.resize(static_cast<size_t>(p.k * p.n));
  made.c.resize(static_cast<size_t>(p.m * made.ldc));
  for (auto* v : {&made.a, &made.b, &made.c})
    for (auto& x : *v) x = bf16_bits_of(gaussian(random));
  const int64_t element = f32_d ? 4 : 2;
  made.d.assign(static_cast<size_t>(p.m * made.ldd * element), 0xff);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      float sum = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const uint16_t bv = p.b_mn_major ? made.b[static_cast<size_t>(kk * p.n + j)] : made.b[static_cast<size_t>(j * p.k + kk)];
        sum += static_cast<float>(bf16_value(made.a[static_cast<size_t>(i * p.k + kk)])) * static_cast<float>(bf16_value(bv));
      }
      const float value = p.alpha * sum + p.beta * static_cast<float>(bf16_value(made.c[static_cast<size_t>(i * made.ldc + j)])) + (i == j ? p.gamma : 0.0f);
      const size_t at = static_cast<size_t>(i * made.ldd + j);
      if (f32_d) {
        std::memcpy(&made.d[at * 4], &value, 4);
      } else {
        const uint16_t bits = bf16_bits_of(value);
        std::memcpy(&made.d[at * 2], &bits, 2);
      }
    }
  return made;
}

ProductCheck check(const Made& made, unsigned threads) {
  return check_product_against_f64(made.p, made.a, made.b, made.c, made.ldc, made.d.data(), made.ldd, made.f32_d, threads);
}

void set(Made& made, int64_t i, int64_t j, double value) {
  const size_t at = static_cast<size_t>(i * made.ldd + j);
  if (made.f32_d) {
    const float f = static_cast<float>(value);
    std::memcpy(&made.d[at * 4], &f, 4);
  } else {
    const uint16_t bits = bf16_bits_of(static_cast<float>(value));
    std::memcpy(&made.d[at * 2], &bits, 2);
  }
}

double get(const Made& made, int64_t i, int64_t j) {
  const size_t at = static_cast<size_t>(i * made.ldd + j);
  if (made.f32_d) {
    float f;
    std::memcpy(&f, &made.d[at * 4], 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, &made.d[at * 2], 2);
  return bf16_value(bits);
}

TEST(HopperProductReference, ACorrectProductPassesForBothLayoutsAndTypes) {
  const ProductProblem problems[] = {{37, 45, 96, false, 0.75f, -0.5f, 0.25f}, {40, 24, 72, true, 1.0f, 0.5f, 0.0f}, {16, 16, 640, false, 1.0f, 0.0f, 0.0f}};
  unsigned seed = 1;
  for (const ProductProblem& p : problems)
    for (const bool f32_d : {false, true}) {
      SCOPED_TRACE(std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k) + (p.b_mn_major ? " MN-major" : " K-major") + (f32_d ? " f32" : " bf16"));
      const Made made = make(p, f32_d, seed++);
      const ProductCheck result = check(made, 3);
      EXPECT_EQ(result.bad, 0) << result.first_bad;
      EXPECT_EQ(result.red_zone, 0);
      EXPECT_GT(result.worst, 0.0);
      EXPECT_LE(result.worst, 1.0);
    }
}

// One wrong element of a 16x16 tile, a written red-zone element, a NaN: each found, the first bad
// element named as a sequential walk would, for 1, 2, 3 and 8 threads alike.
TEST(HopperProductReference, PlantedErrorsAreFoundWhateverTheThreads) {
  const ProductProblem p{50, 40, 128, true, 1.0f, -0.5f, 0.0f};
  for (const bool f32_d : {false, true}) {
    Made made = make(p, f32_d, 7);
    set(made, 33, 17, get(made, 33, 17) + 0.25);  // far beyond a bf16 ulp of these O(10) sums
    set(made, 41, 2, get(made, 41, 2) * 1.5);
    const size_t red = static_cast<size_t>(5 * made.ldd + p.n + 3) * (f32_d ? 4 : 2);
    made.d[red] = 0;
    const ProductCheck one = check(made, 1);
    EXPECT_EQ(one.bad, 2);
    EXPECT_EQ(one.red_zone, 1);
    EXPECT_EQ(one.first_bad.rfind("D(33, 17) = ", 0), 0u) << one.first_bad;
    EXPECT_GT(one.worst, 1.0);
    for (const unsigned threads : {2u, 3u, 8u}) {
      const ProductCheck many = check(made, threads);
      EXPECT_EQ(many.bad, one.bad) << threads;
      EXPECT_EQ(many.red_zone, one.red_zone) << threads;
      EXPECT_EQ(many.first_bad, one.first_bad) << threads;
      EXPECT_EQ(many.worst, one.worst) << threads;
    }
    set(made, 0, 0, std::nan(""));
    EXPECT_EQ(check(made, 2).bad, 3);
    EXPECT_EQ(check(made, 2).first_bad.rfind("D(0, 0) = ", 0), 0u);
  }
}

// γ belongs on the diagonal only; β·C counts only when β is not zero (C may then be anything).
TEST(HopperProductReference, TheEpilogueTermsAreChecked) {
  ProductProblem p{24, 24, 64, false, 1.0f, 0.0f, 2.0f};
  Made made = make(p, true, 11);
  EXPECT_EQ(check(made, 2).bad, 0);
  for (auto& x : made.c) x = bf16_bits_of(1000.0f);  // unused: β = 0
  EXPECT_EQ(check(made, 2).bad, 0);
  set(made, 3, 4, get(made, 3, 4) + 2.0);  // γ off the diagonal
  EXPECT_EQ(check(made, 2).bad, 1);
  made.p.gamma = 0;  // now every diagonal element has a γ too many
  EXPECT_EQ(check(made, 2).bad, 1 + p.m);
}

}  // namespace
}  // namespace orthojit::device_test
