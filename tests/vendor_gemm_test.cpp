// The vendor engines' products (OpenBLAS sgemm/ssyrk, oneDNN matmul, with their host loops:
// widening, C copied in, mirroring, the epilogue) against D = α·A·B + β·C + γ·I computed in f64
// from the stored operand values, on fresh random inputs each run (the seed is printed), and the
// OpenBLAS kernel orthojit chooses for the CPU.
//
// Tolerance, per element: the products accumulate in f32, so for any summation order and blocking
// (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., eq. 3.5)
//   |fl(α·A·B + β·C) − (α·A·B + β·C)| ≤ γ_{k+4} · (|α|·Σ_p |A_ip||B_pj| + |β||C_ij| + |γ|),
// γ_n = n·u/(1 − n·u), u = 2^-24 (the +4: α, β, γ and the f32 copy of C, each one rounding),
// and the final rounding to D's type adds u_D·|D_ij| (2^-8 bf16, 2^-11 f16, 2^-24 f32). Each
// element's error is divided by its own bound and the largest quotient must stay ≤ 1: a wrong
// element anywhere (a dropped γ, a missed mirror, a bad edge tile, a transposed block) is an
// error of the size of the data, orders of magnitude above a bound of O(k·u). The largest error
// relative to the output's RMS is printed too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "cpu/build_status.h"
#include "cpu/element_types.h"
#include "cpu/thread_pool.h"
#include "cpu/vendor_gemm.h"
#include "reference/random_matrix.h"
#include "support/host_cpu.h"

#ifdef ORTHOJIT_HAVE_VENDOR_BLAS
#include "cpu/openblas_library.h"
#endif

namespace orthojit::cpu {
namespace {

double output_roundoff(ScalarType type) {
  switch (type) {
    case ScalarType::BF16: return std::ldexp(1.0, -8);
    case ScalarType::F16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

// A stored rows×cols matrix (row-major, leading dimension cols) of one storage type, and its
// values as stored, in f64.
struct Stored {
  ScalarType type;
  int64_t rows, cols;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  Stored(ScalarType t, int64_t r, int64_t c, const std::vector<double>& values) : type(t), rows(r), cols(c) {
    for (double v : values) {
      if (t == ScalarType::F32) f32.push_back(static_cast<float>(v));
      else if (t == ScalarType::BF16) half.push_back(from_float<Bf16>(static_cast<float>(v)).bits);
      else half.push_back(from_float<F16>(static_cast<float>(v)).bits);
    }
    if (values.empty()) {  // an output: poisoned, so an element never written shows
      if (t == ScalarType::F32) f32.assign(static_cast<size_t>(r * c), std::nanf(""));
      else half.assign(static_cast<size_t>(r * c), 0x7fc0);
    }
  }
  void* data() { return type == ScalarType::F32 ? static_cast<void*>(f32.data()) : static_cast<void*>(half.data()); }
  MatrixView view() { return {data(), type, rows, cols, cols, 1}; }
  double at(int64_t i, int64_t j) const {
    const size_t k = static_cast<size_t>(i * cols + j);
    if (type == ScalarType::F32) return f32[k];
    return type == ScalarType::BF16 ? to_float(Bf16{half[k]}) : to_float(F16{half[k]});
  }
};

double view_at(const MatrixView& view, const Stored& storage, int64_t i, int64_t j) {
  const int64_t offset = i * view.row_stride + j * view.col_stride;
  return storage.at(offset / storage.cols, offset % storage.cols);
}

uint64_t fresh_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

struct Case {
  int64_t m, n, k;
  ScalarType ab, c, d;  // operand, C and D storage
  bool transpose_a, transpose_b, with_c, symmetric;
  float alpha, beta, gamma;
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " ab=" + std::string(to_string(ab)) + (with_c ? " c=" + std::string(to_string(c)) : "") +
           " d=" + std::string(to_string(d)) + (transpose_a ? " Aᵀ" : "") + (transpose_b ? " Bᵀ" : "") + (symmetric ? " A·Aᵀ" : "") + " α=" + std::to_string(alpha) +
           " β=" + std::to_string(beta) + " γ=" + std::to_string(gamma);
  }
};

// Runs one case on `engine` and returns the largest error/bound quotient (and prints the largest
// error relative to the output's RMS).
double worst_quotient(ProductEngine engine, const Case& test, ThreadPool* pool, uint64_t seed) {
  // A is m×k; stored as k×m when transposed (the view is then its transpose).
  Stored a_store(test.ab, test.transpose_a ? test.k : test.m, test.transpose_a ? test.m : test.k, reference::gaussian_values(test.m * test.k, seed));
  const MatrixView a = test.transpose_a ? a_store.view().transposed() : a_store.view();
  Stored b_store(test.ab, test.transpose_b ? test.n : test.k, test.transpose_b ? test.k : test.n, reference::gaussian_values(test.k * test.n, seed + 1));
  MatrixView b = test.transpose_b ? b_store.view().transposed() : b_store.view();
  if (test.symmetric) b = a.transposed();  // B = Aᵀ: the same storage, as the executable passes X·Xᵀ
  const Stored& b_values = test.symmetric ? a_store : b_store;
  // A symmetric product's C is symmetric (D is): S + Sᵀ.
  std::vector<double> c_values = reference::gaussian_values(test.m * test.n, seed + 2);
  if (test.symmetric)
    for (int64_t i = 0; i < test.m; ++i)
      for (int64_t j = 0; j < i; ++j) c_values[static_cast<size_t>(i * test.n + j)] = c_values[static_cast<size_t>(j * test.n + i)];
  Stored c_store(test.c, test.m, test.n, c_values);
  Stored d_store(test.d, test.m, test.n, {});

  GemmProblem problem;
  problem.a = a;
  problem.b = b;
  if (test.with_c) problem.c = c_store.view();
  problem.d = d_store.view();
  problem.alpha = test.alpha;
  problem.beta = test.with_c ? test.beta : 0.0f;
  problem.gamma = test.gamma;
  problem.triangular = test.symmetric;
  if (engine == ProductEngine::OpenBlas) run_openblas_product(problem, pool);
  else run_onednn_product(problem, pool);

  const double u32 = std::ldexp(1.0, -24), n_u = static_cast<double>(test.k + 4) * u32, gamma_k = n_u / (1 - n_u), u_d = output_roundoff(test.d);
  double worst = 0, worst_error = 0, sum_squares = 0;
  int64_t worst_i = 0, worst_j = 0;
  for (int64_t i = 0; i < test.m; ++i)
    for (int64_t j = 0; j < test.n; ++j) {
      double exact = 0, magnitude = 0;
      for (int64_t p = 0; p < test.k; ++p) {
        const double x = view_at(a, a_store, i, p), y = view_at(b, b_values, p, j);
        exact += x * y;
        magnitude += std::abs(x * y);
      }
      exact *= test.alpha;
      magnitude *= std::abs(test.alpha);
      if (test.with_c) {
        exact += test.beta * c_store.at(i, j);
        magnitude += std::abs(test.beta * c_store.at(i, j));
      }
      if (i == j) {
        exact += test.gamma;
        magnitude += std::abs(test.gamma);
      }
      const double bound = u_d * std::abs(exact) + (1 + u_d) * gamma_k * magnitude + 1e-300;
      const double error = std::abs(d_store.at(i, j) - exact);  // NaN (never written) fails below
      const double quotient = std::isnan(error) ? INFINITY : error / bound;
      sum_squares += exact * exact;
      if (!(quotient <= worst)) {
        worst = quotient;
        worst_i = i, worst_j = j;
      }
      worst_error = std::max(worst_error, std::isnan(error) ? INFINITY : error);
    }
  const double rms = std::sqrt(sum_squares / static_cast<double>(test.m * test.n));
  std::printf("%-8s %-78s error/bound %.3g at (%lld, %lld); max error / RMS %.3g\n", to_string(engine), test.name().c_str(), worst,
              static_cast<long long>(worst_i), static_cast<long long>(worst_j), worst_error / rms);
  return worst;
}

std::vector<Case> cases() {
  using enum ScalarType;
  return {
      // f32 in place (row-major and transposed views), f32 D written by the call with β inside.
      {37, 53, 300, F32, F32, F32, false, false, true, false, 1.5f, -0.5f, 2.0f},
      {64, 48, 129, F32, F32, F32, true, true, true, false, -1.0f, 0.25f, 0.0f},
      // bf16 operands widened (or bf16 matmul), bf16 D: the epilogue pass rounds once.
      {100, 70, 257, BF16, BF16, BF16, false, false, true, false, 1.0f, 1.0f, -3.0f},
      {33, 90, 64, BF16, BF16, BF16, true, false, false, false, 2.0f, 0.0f, 0.5f},
      {40, 75, 500, BF16, BF16, F32, false, true, true, false, 0.5f, 3.0f, 1.0f},  // bf16 C into an f32 D
      {31, 29, 17, F16, F16, F16, false, true, true, false, 1.0f, -1.0f, 4.0f},
      // The symmetric product X·Xᵀ (ssyrk + mirror on OpenBLAS) with a symmetric C, odd sizes
      // so the 64×64 mirror blocks have edges; row-major and transposed X.
      {130, 130, 200, BF16, BF16, BF16, false, false, true, true, 3.4445f, -4.775f, 2.0315f},
      {97, 97, 150, F32, F32, F32, false, false, true, true, 1.0f, 0.5f, -1.0f},
      {70, 70, 300, BF16, BF16, F32, true, false, false, true, -2.0f, 0.0f, 1.5f},
  };
}

void check_engine(ProductEngine engine) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ThreadPool pool(3);  // more workers than this machine may have: the row split is exercised
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
    for (const Case& test : cases()) EXPECT_LE(worst_quotient(engine, test, p, seed), 1.0) << to_string(engine) << " " << test.name() << (p ? " pool" : " no pool");
}

TEST(VendorGemm, OpenBlasMatchesAnF64Product) {
  if (!vendor_blas_unavailable_reason().empty()) GTEST_SKIP() << vendor_blas_unavailable_reason();
  check_engine(ProductEngine::OpenBlas);
}

TEST(VendorGemm, OneDnnMatchesAnF64Product) {
  if (const std::string reason = onednn_unavailable_reason(ScalarType::BF16); !reason.empty()) GTEST_SKIP() << reason;
  std::printf("%s\n", onednn_description().c_str());
  check_engine(ProductEngine::OneDnn);
}

#ifdef ORTHOJIT_HAVE_VENDOR_BLAS
// OpenBLAS's thread count is the process's (PyTorch's f32 matmuls share the library): a product
// on the openblas engine runs on its own count and puts back the one it found.
TEST(VendorGemm, AProductPutsBackTheOpenBlasThreadsItFound) {
  if (!openblas_unavailable_reason().empty()) GTEST_SKIP() << openblas_unavailable_reason();
  const int before = openblas_threads();
  openblas_set_threads(5);  // what another user of the library set
  ASSERT_EQ(openblas_threads(), 5);
  const uint64_t seed = fresh_seed();
  ThreadPool pool(3);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    EXPECT_LE(worst_quotient(ProductEngine::OpenBlas, cases().front(), p, seed), 1.0);
    EXPECT_EQ(openblas_threads(), 5) << (p ? "pool" : "no pool");
  }
  openblas_set_threads(before);
}

TEST(VendorGemm, CoretypeForTheCpu) {
  HostCpu cpu;
  EXPECT_EQ(openblas_coretype_for(cpu, false), "");  // no AVX2: OpenBLAS's own choice
  cpu.avx2 = true;
  EXPECT_EQ(openblas_coretype_for(cpu, false), "");  // AVX2 without FMA is not Haswell
  cpu.fma = true;
  EXPECT_EQ(openblas_coretype_for(cpu, false), "Haswell");
  EXPECT_EQ(openblas_coretype_for(cpu, true), "Zen");
  cpu.avx512f = true;
  EXPECT_EQ(openblas_coretype_for(cpu, false), "SkylakeX");
  EXPECT_EQ(openblas_coretype_for(cpu, true), "SkylakeX");
}

TEST(VendorGemm, CoretypesThisCpuCannotRun) {
  HostCpu cpu;  // no AVX2: only the generic kernels run
  EXPECT_EQ(openblas_coretype_missing_isa("SkylakeX", cpu), "AVX-512F");
  EXPECT_EQ(openblas_coretype_missing_isa("skylakex", cpu), "AVX-512F");  // OpenBLAS ignores case
  EXPECT_EQ(openblas_coretype_missing_isa("Haswell", cpu), "AVX2 and FMA");
  EXPECT_EQ(openblas_coretype_missing_isa("ZEN", cpu), "AVX2 and FMA");
  EXPECT_EQ(openblas_coretype_missing_isa("Prescott", cpu), "");
  EXPECT_EQ(openblas_coretype_missing_isa("SomethingNew", cpu), "");  // unknown: left to OpenBLAS
  cpu.avx2 = true;
  EXPECT_EQ(openblas_coretype_missing_isa("Haswell", cpu), "AVX2 and FMA");  // FMA missing
  cpu.fma = true;
  EXPECT_EQ(openblas_coretype_missing_isa("Haswell", cpu), "");
  EXPECT_EQ(openblas_coretype_missing_isa("Zen", cpu), "");
  EXPECT_EQ(openblas_coretype_missing_isa("Cooperlake", cpu), "AVX-512F");
  cpu.avx512f = true;
  EXPECT_EQ(openblas_coretype_missing_isa("SkylakeX", cpu), "");
  EXPECT_EQ(openblas_coretype_missing_isa("Cooperlake", cpu), "AVX512-BF16");
  EXPECT_EQ(openblas_coretype_missing_isa("SapphireRapids", cpu), "AVX512-BF16");
  cpu.avx512bf16 = true;
  EXPECT_EQ(openblas_coretype_missing_isa("SapphireRapids", cpu), "");
}

// Runs this test binary's child test below in a fresh process (OpenBLAS chooses its kernel once
// per process, when it is loaded) with OPENBLAS_CORETYPE removed from, or set in, the child's
// environment only; returns what the child printed.
std::string run_child(const std::string& environment) {
  const std::string command = environment + " /proc/" + std::to_string(::getpid()) +
                              "/exe --gtest_also_run_disabled_tests --gtest_filter=VendorGemm.DISABLED_ChildReportsTheKernel 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  std::string output;
  char buffer[512];
  while (pipe && std::fgets(buffer, sizeof buffer, pipe.get())) output += buffer;
  return output;
}

std::string field(const std::string& output, const std::string& name) {
  const size_t start = output.find(name + "=[");
  if (start == std::string::npos) return "(missing)";
  const size_t begin = start + name.size() + 2;
  return output.substr(begin, output.find(']', begin) - begin);
}

TEST(VendorGemm, DISABLED_ChildReportsTheKernel) {
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string before_text = before ? before : "(unset)";
  const std::string kernel = openblas_kernel_name();  // opens the library
  const char* after = std::getenv("OPENBLAS_CORETYPE");
  // One product, so a kernel the CPU cannot run would end the child here (SIGILL) instead.
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {};
  openblas_sgemm(false, false, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  const bool ran = c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50;
  std::printf("kernel=[%s] origin=[%s] env_before=[%s] env_after=[%s] warning=[%s] kernel_ran=[%s]\n", kernel.c_str(), openblas_coretype_origin().c_str(),
              before_text.c_str(), after ? after : "(unset)", openblas_kernel_warning().c_str(), ran ? "yes" : "no");
}

TEST(VendorGemm, OpenBlasRunsTheBestKernelForTheCpu) {
  if (!openblas_unavailable_reason().empty()) GTEST_SKIP() << openblas_unavailable_reason();
  const HostCpu& cpu = host_cpu();
  const std::string chosen = run_child("env -u OPENBLAS_CORETYPE");
  SCOPED_TRACE(chosen);
  const std::string kernel = field(chosen, "kernel");
  if (cpu.avx512f) {
    EXPECT_TRUE(kernel == "SkylakeX" || kernel == "Cooperlake" || kernel == "SapphireRapids") << kernel;
  } else if (cpu.avx2 && cpu.fma) {
    EXPECT_TRUE(kernel == "Haswell" || kernel == "Zen") << kernel;
  }
  if (cpu.avx2 && cpu.fma) {
    EXPECT_NE(kernel, "Prescott");
    EXPECT_NE(field(chosen, "origin").find("set by orthojit"), std::string::npos);
    EXPECT_EQ(field(chosen, "warning"), "");
  }
  EXPECT_EQ(field(chosen, "env_after"), "(unset)") << "orthojit must put the environment back after opening OpenBLAS";

  // A user's choice stands (and a weak one is warned about on a vector CPU).
  const std::string forced = run_child("env OPENBLAS_CORETYPE=Prescott");
  SCOPED_TRACE(forced);
  EXPECT_EQ(field(forced, "kernel"), "Prescott");
  EXPECT_NE(field(forced, "origin").find("set by the user"), std::string::npos);
  EXPECT_EQ(field(forced, "env_after"), "Prescott");
  if (cpu.avx2 && cpu.fma) {
    EXPECT_NE(field(forced, "warning"), "");
  }
}

// A forced kernel this CPU cannot run would stop the process with SIGILL at the first product
// (OpenBLAS 0.3.21 does not check): orthojit runs its own choice, says so, and leaves the
// variable as the user set it.
TEST(VendorGemm, AKernelTheCpuCannotRunIsReplaced) {
  if (!openblas_unavailable_reason().empty()) GTEST_SKIP() << openblas_unavailable_reason();
  const HostCpu& cpu = host_cpu();
  const char* beyond = !cpu.avx512f ? "SkylakeX" : !cpu.avx512bf16 ? "Cooperlake" : nullptr;
  if (!beyond) GTEST_SKIP() << "this CPU has AVX512-BF16 and runs every OpenBLAS 0.3.21 x86-64 kernel; the table is tested above";
  const std::string forced = run_child(std::string("env OPENBLAS_CORETYPE=") + beyond);
  SCOPED_TRACE(forced);
  const std::string ours = openblas_coretype_for_host();
  if (!ours.empty()) {
    EXPECT_EQ(field(forced, "kernel"), ours);
  }
  EXPECT_EQ(field(forced, "kernel_ran"), "yes");  // a product ran: no SIGILL
  const std::string origin = field(forced, "origin");
  EXPECT_NE(origin.find(std::string("OPENBLAS_CORETYPE=") + beyond + " set by the user needs "), std::string::npos) << origin;
  EXPECT_NE(origin.find("which this CPU lacks"), std::string::npos) << origin;
  EXPECT_EQ(field(forced, "warning"), origin);
  EXPECT_EQ(field(forced, "env_after"), beyond);
}
#endif

}  // namespace
}  // namespace orthojit::cpu
