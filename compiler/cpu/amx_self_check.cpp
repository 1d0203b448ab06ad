// The AMX self-check (amx_self_check.h).
#include "cpu/amx_self_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "cpu/cpu_isa.h"
#include "cpu/element_types.h"
#include "cpu/kernel_cache.h"
#include "support/host_cpu.h"

namespace orthojit::cpu {
namespace {

// 16-bit storage bits of a float (round to nearest even) and back.
uint16_t to_bits(float value, ScalarType type) { return type == ScalarType::F16 ? from_float<F16>(value).bits : from_float<Bf16>(value).bits; }
double from_bits(uint16_t bits, ScalarType type) { return type == ScalarType::F16 ? to_float(F16{bits}) : to_float(Bf16{bits}); }

struct Product {
  int64_t m, n, k;
  bool transpose_b;  // B = Xᵀ read from X's rows (the X·Xᵀ form)
  bool triangular;   // A·Aᵀ, upper microtiles and the mirror
};

// What one product found: the largest error as a multiple of its element's bound (> 1 fails).
struct Finding {
  double worst_ratio = 0;
  int64_t row = 0, col = 0;
  bool finite = true;
};

Finding run_product(const MicrokernelProvider& kernels, const Product& p, ScalarType operands, uint64_t seed) {
  // A small linear congruential generator: the check is the same on every run and machine.
  uint64_t state = seed;
  auto uniform = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  };
  const int64_t n = p.triangular ? p.m : p.n;
  std::vector<uint16_t> a(static_cast<size_t>(p.m * p.k)), b(static_cast<size_t>(p.k * n));
  for (auto& bits : a) bits = to_bits(uniform(), operands);
  // B stored as (K, N) rows, or as Xᵀ: (N, K) rows read transposed; the triangular product's B is Aᵀ.
  for (auto& bits : b) bits = to_bits(uniform(), operands);
  auto a_at = [&](int64_t i, int64_t kk) { return from_bits(a[static_cast<size_t>(i * p.k + kk)], operands); };
  auto b_at = [&](int64_t kk, int64_t j) {
    if (p.triangular) return a_at(j, kk);
    return from_bits(b[static_cast<size_t>(p.transpose_b ? j * p.k + kk : kk * n + j)], operands);
  };
  std::vector<float> c(static_cast<size_t>(p.m * n)), d(static_cast<size_t>(p.m * n), std::numeric_limits<float>::quiet_NaN());
  for (auto& value : c) value = uniform();
  if (p.triangular)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < i; ++j) c[static_cast<size_t>(i * n + j)] = c[static_cast<size_t>(j * n + i)];
  GemmProblem problem;
  problem.a = MatrixView{a.data(), operands, p.m, p.k, p.k, 1};
  if (p.triangular) problem.b = problem.a.transposed();
  else if (p.transpose_b) problem.b = MatrixView{b.data(), operands, n, p.k, p.k, 1}.transposed();
  else problem.b = MatrixView{b.data(), operands, p.k, n, n, 1};
  problem.c = MatrixView{c.data(), ScalarType::F32, p.m, n, n, 1};
  problem.d = MatrixView{d.data(), ScalarType::F32, p.m, n, n, 1};
  problem.alpha = 1.5f;
  problem.beta = -0.5f;
  problem.gamma = 0.25f;
  problem.triangular = p.triangular;
  GemmBlocking blocking;
  blocking.amx_fp16 = operands == ScalarType::F16;
  blocking.amx_kc = 64;  // two K blocks of 64 and a remainder for k = 150
  GemmDriver(CpuIsa::AmxBf16, blocking, kernels).run(problem, nullptr);
  // Each element against its float64 value. The products of 16-bit values are exact in f32 and
  // the tiles add K of them in f32 (pairwise within a dot product, then into the accumulator):
  // at most (K + 2) roundings of 2^-24 relative to the sum of magnitudes, doubled for margin; the
  // epilogue adds a few roundings of its terms. A wrong element is off by a product's size.
  constexpr double u = 0x1.0p-24;
  Finding finding;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        sum += a_at(i, kk) * b_at(kk, j);
        magnitude += std::fabs(a_at(i, kk) * b_at(kk, j));
      }
      const double cij = c[static_cast<size_t>(i * n + j)];
      const double expected = problem.alpha * sum + problem.beta * cij + (i == j ? problem.gamma : 0.0);
      const double bound = 2.0 * (static_cast<double>(p.k) + 2.0) * u * problem.alpha * magnitude +
                           8.0 * u * (std::fabs(problem.beta * cij) + problem.gamma + std::fabs(expected)) + 1e-30;
      const double got = d[static_cast<size_t>(i * n + j)];
      if (!std::isfinite(got)) {
        finding.finite = false;
        finding.row = i;
        finding.col = j;
        return finding;
      }
      const double ratio = std::fabs(got - expected) / bound;
      if (ratio > finding.worst_ratio) finding = {ratio, i, j, true};
    }
  return finding;
}

// The products: ragged M, N and K (24 valid rows and columns of a 32 x 32 microtile: a whole
// 16-row tile and a partial one; K blocks of 64 and a zero-padded 32-pair step), B as stored rows
// and as Xᵀ, and the triangular X·Xᵀ with its mirror; M ≠ N where it can be, so that swapped
// extents show. The remainders are the same in every product, so the check compiles 8 kernels
// per operand type (valid rows 32 or 24, columns 32 or 24, K steps 64 or 32).
constexpr Product kProducts[] = {
    {56, 88, 150, false, false},
    {56, 88, 70, true, false},
    {56, 56, 96, true, true},
};

std::string describe(const Product& p) {
  return std::to_string(p.m) + "x" + std::to_string(p.triangular ? p.m : p.n) + "x" + std::to_string(p.k) +
         (p.triangular ? " triangular" : p.transpose_b ? " with B = Xᵀ" : "");
}

// "" when every product is within its bounds, else what failed; `worst` gets the largest ratio.
std::string check_operands(const MicrokernelProvider& kernels, ScalarType operands, double& worst) {
  uint64_t seed = 0x5eed;
  for (const Product& p : kProducts) {
    Finding finding;
    try {
      finding = run_product(kernels, p, operands, ++seed);
    } catch (const std::exception& error) {
      return std::string(to_string(operands)) + " " + describe(p) + ": " + error.what();
    }
    char text[256];
    if (!finding.finite) {
      std::snprintf(text, sizeof text, "%s %s: element (%lld, %lld) is not finite (never written?)", std::string(to_string(operands)).c_str(), describe(p).c_str(),
                    static_cast<long long>(finding.row), static_cast<long long>(finding.col));
      return text;
    }
    if (finding.worst_ratio > 1.0) {
      std::snprintf(text, sizeof text, "%s %s: element (%lld, %lld) off by %.3g times its f32-accumulation bound", std::string(to_string(operands)).c_str(),
                    describe(p).c_str(), static_cast<long long>(finding.row), static_cast<long long>(finding.col), finding.worst_ratio);
      return text;
    }
    worst = std::max(worst, finding.worst_ratio);
  }
  return "";
}

}  // namespace

AmxSelfCheck run_amx_self_check(const MicrokernelProvider& kernels, bool with_fp16) {
  AmxSelfCheck check;
  check.ran = true;
  double worst = 0;
  const std::string bf16_failure = check_operands(kernels, ScalarType::BF16, worst);
  check.bf16_passed = bf16_failure.empty();
  check.fp16_checked = with_fp16;
  std::string fp16_failure;
  if (with_fp16 && check.bf16_passed) {
    fp16_failure = check_operands(kernels, ScalarType::F16, worst);
    check.fp16_passed = fp16_failure.empty();
  }
  if (!check.bf16_passed) check.detail = "the tile kernels failed their self-check: " + bf16_failure;
  else if (with_fp16 && !check.fp16_passed) check.detail = "the AMX-FP16 kernels failed their self-check (f16 products stay on FMAs): " + fp16_failure;
  else {
    char text[160];
    std::snprintf(text, sizeof text, "self-check passed: %zu products%s, worst error %.2g of its bound", std::size(kProducts), with_fp16 ? " each in bf16 and f16" : "", worst);
    check.detail = text;
  }
  return check;
}

const AmxSelfCheck& amx_self_check() {
  static const AmxSelfCheck check = [] {
    AmxSelfCheck result;
    if (!host_executes(CpuIsa::AmxBf16)) {
      result.detail = "not run: AMX is not executable here (" + (amx_availability().usable ? std::string("no AVX512-BF16") : amx_availability().reason) + ")";
      return result;
    }
    if (const char* mode = std::getenv("ORTHOJIT_AMX_SELF_CHECK"); mode && std::string_view(mode) == "off") {
      result.ran = false;
      result.bf16_passed = result.fp16_passed = true;
      result.fp16_checked = host_cpu().amx_fp16;
      result.detail = "self-check skipped (ORTHOJIT_AMX_SELF_CHECK=off)";
      return result;
    }
    try {
      result = run_amx_self_check([](const MicrokernelSpec& spec) { return get_microkernel(spec).function; }, host_cpu().amx_fp16);
    } catch (const std::exception& error) {  // no JIT in this build, or a kernel that did not compile
      result = AmxSelfCheck{};
      result.detail = std::string("the tile kernels could not run their self-check: ") + error.what();
    }
    if (!result.bf16_passed || (result.fp16_checked && !result.fp16_passed))
      std::fprintf(stderr, "orthojit: warning: %s\n", result.detail.c_str());
    return result;
  }();
  return check;
}

bool amx_fp16_usable() { return host_supports(CpuIsa::AmxBf16) && host_cpu().amx_fp16 && amx_self_check().fp16_passed; }

}  // namespace orthojit::cpu
