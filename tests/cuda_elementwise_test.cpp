// The optimizer's generated element-wise CUDA kernels (compiler/cuda/elementwise_codegen.h):
// every variant compiles with NVRTC for sm_80 and sm_90 without spills, and runs in the host
// emulation (tests/cuda_host_emulation.h: the same vocabulary, sequential threads) bit for bit
// like the C++ update rules they replace on the device (runtime/muon/update_rules.h), on fresh
// random data in every storage combination, with lr adjustments that differ per row block, and
// across the f64 → bf16/f16 roundings that a detour through f32 would get wrong.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>
#include <sstream>

#include "cuda/elementwise_codegen.h"
#include "cuda/nvrtc_compiler.h"
#include "kernels/cuda_device_headers.h"
#include "runtime/muon/update_rules.h"
#include "support/rounding.h"

namespace orthojit {
namespace {

using runtime::DType;

ScalarType scalar(DType type) { return type == DType::F32 ? ScalarType::F32 : type == DType::BF16 ? ScalarType::BF16 : ScalarType::F16; }

// Element storage in the kernels' form (f32 or 16-bit bits), converted from f64 values as the
// runtime stores them.
std::vector<unsigned char> stored(DType type, const std::vector<double>& values) {
  std::vector<unsigned char> bytes(values.size() * static_cast<size_t>(runtime::dtype_bytes(type)));
  for (size_t i = 0; i < values.size(); ++i) runtime::store_element(type, bytes.data(), static_cast<int64_t>(i), values[i]);
  return bytes;
}

std::vector<double> random_values(size_t count, std::mt19937& random, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> values(count);
  for (double& v : values) v = normal(random);
  return values;
}

// One generated kernel compiled against the emulation header into a shared library with a
// trampoline that runs its whole grid, threads one after another (an element-wise kernel has no
// barriers and no shared memory).
class EmulatedKernel {
 public:
  EmulatedKernel(const std::string& source, const std::string& kernel, const std::string& signature, const std::string& call) {
    directory_ = std::filesystem::temp_directory_path() / ("orthojit_elementwise_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(directory_);
    const std::filesystem::path tests = std::filesystem::path(ORTHOJIT_SOURCE_DIR) / "tests";
    std::filesystem::copy_file(tests / "cuda_host_emulation.h", directory_ / "cuda_host_emulation.h", std::filesystem::copy_options::overwrite_existing);
    std::ofstream(directory_ / "orthojit_device.cuh") << "#pragma once\n#include \"cuda_host_emulation.h\"\n";
    std::ofstream(directory_ / "kernel.cu") << source;
    std::ofstream(directory_ / "trampoline.cpp")
        << "#include \"kernel.cu\"\n#include <tuple>\n"
        << "template <unsigned long N, class F> struct oj_param;\n"
        << "template <unsigned long N, class R, class... A> struct oj_param<N, R (*)(A...)> { using type = std::tuple_element_t<N, std::tuple<A...>>; };\n"
        << "#define OJ_PARAM(N) oj_param<N, decltype(&" << kernel << ")>::type\n"
        << "extern \"C\" __attribute__((visibility(\"default\"))) void oj_run(" << signature << ", unsigned grid, unsigned block) {\n"
        << "  gridDim = {grid, 1, 1};\n  blockDim = {block, 1, 1};\n"
        << "  for (unsigned oj_b = 0; oj_b < grid; ++oj_b)\n    for (unsigned oj_t = 0; oj_t < block; ++oj_t) {\n"
        << "      blockIdx = {oj_b, 0, 0};\n      threadIdx = {oj_t, 0, 0};\n      " << kernel << "(" << call << ");\n    }\n}\n";
    const std::string command = "cd '" + directory_.string() +
                                "' && c++ -std=c++20 -O1 -fPIC -shared -pthread -w -ffp-contract=off -fvisibility=hidden -I. -o kernel.so trampoline.cpp > "
                                "build.log 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::ifstream log(directory_ / "build.log");
      std::ostringstream text;
      text << log.rdbuf();
      throw std::runtime_error("compiling the emulated kernel failed:\n" + text.str());
    }
    library_ = dlopen((directory_ / "kernel.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library_) throw std::runtime_error(dlerror());
    run_ = dlsym(library_, "oj_run");
  }
  ~EmulatedKernel() {
    if (library_) dlclose(library_);
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  template <class F>
  F* function() const {
    return reinterpret_cast<F*>(run_);
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path directory_;
  void* library_ = nullptr;
  void* run_ = nullptr;
};

// 3 CTAs of 64 threads over ~1000 elements: the grid-stride loop wraps several times.
constexpr unsigned kGrid = 3, kBlock = 64;

bool have_host_compiler() { return std::system("command -v c++ > /dev/null 2>&1") == 0; }

TEST(CudaElementwise, EveryVariantCompilesForSm80AndSm90WithoutSpills) {
  std::vector<std::string> sources;
  for (ScalarType g : {ScalarType::F32, ScalarType::BF16, ScalarType::F16})
    for (bool ema : {true, false})
      for (bool nesterov : {true, false}) sources.push_back(cuda::generate_muon_momentum({g, ema, nesterov}));
  for (ScalarType p : {ScalarType::F32, ScalarType::BF16, ScalarType::F16}) {
    sources.push_back(cuda::generate_muon_apply({p}));
    for (ScalarType g : {ScalarType::F32, ScalarType::BF16})
      for (bool moonlight : {false, true}) sources.push_back(cuda::generate_adamw({g, p, moonlight}));
    sources.push_back(cuda::generate_nonfinite_check(p));
    sources.push_back(cuda::generate_accumulate(p));
    for (ScalarType d : {ScalarType::F32, ScalarType::BF16, ScalarType::F16}) sources.push_back(cuda::generate_convert(p, d));
  }
  sources.push_back(cuda::generate_divide());
  sources.push_back(cuda::generate_sum_squares());
  for (const std::string& source : sources)
    for (const char* arch : {"sm_80", "sm_90"}) {
      const cuda::NvrtcOutput out = cuda::compile_cuda(source, kernels::cuda_device_headers(), arch);
      ASSERT_EQ(out.resources.size(), 1u) << out.log;
      for (const auto& [name, r] : out.resources) {
        EXPECT_EQ(r.spill_store_bytes, 0) << name << " " << arch;
        EXPECT_EQ(r.spill_load_bytes, 0) << name << " " << arch;
        EXPECT_LE(r.registers, 64) << name << " " << arch;
      }
    }
  EXPECT_THROW(cuda::generate_muon_apply({ScalarType::F64}), std::invalid_argument);
}

TEST(CudaElementwise, MomentumKernelsMatchTheUpdateRulesBitForBit) {
  if (!have_host_compiler()) GTEST_SKIP() << "no host c++ for the emulation";
  std::mt19937 random(std::random_device{}());
  const int64_t count = 1000;
  using Run = void(const void*, float*, float*, double, long long, unsigned, unsigned);
  for (DType grad : {DType::F32, DType::BF16, DType::F16})
    for (bool ema : {true, false})
      for (bool nesterov : {true, false}) {
        SCOPED_TRACE(std::string(to_string(grad)) + (ema ? " ema" : " sum") + (nesterov ? " nesterov" : ""));
        EmulatedKernel kernel(cuda::generate_muon_momentum({scalar(grad), ema, nesterov}), "oj_muon_momentum",
                              "const void* g, float* m, float* u, double beta, long long count",
                              "static_cast<OJ_PARAM(0)>(g), m, u, beta, count");
        const std::vector<unsigned char> g = stored(grad, random_values(count, random, 1.0));
        const std::vector<double> m0 = random_values(count, random, 3.0);
        std::vector<float> m_kernel(m0.begin(), m0.end()), m_rules = m_kernel, u_kernel(count, -1.0f), u_rules(count, -2.0f);
        std::vector<float> g32(count);
        for (int64_t i = 0; i < count; ++i) g32[static_cast<size_t>(i)] = static_cast<float>(runtime::load_element(grad, g.data(), i));
        runtime::MuonGroupSettings muon;
        muon.momentum = 0.93;
        muon.momentum_kind = ema ? runtime::MomentumKind::Ema : runtime::MomentumKind::Sum;
        muon.nesterov = nesterov;
        kernel.function<Run>()(g.data(), m_kernel.data(), u_kernel.data(), muon.momentum, count, kGrid, kBlock);
        runtime::muon_momentum(muon, g32.data(), m_rules.data(), u_rules.data(), count);
        EXPECT_EQ(std::memcmp(m_kernel.data(), m_rules.data(), count * 4), 0) << "momentum";
        EXPECT_EQ(std::memcmp(u_kernel.data(), u_rules.data(), count * 4), 0) << "update";
      }
}

TEST(CudaElementwise, ApplyKernelsMatchTheUpdateRulesBitForBit) {
  if (!have_host_compiler()) GTEST_SKIP() << "no host c++ for the emulation";
  std::mt19937 random(std::random_device{}());
  // 3 matrices of 12 x 30 with row blocks of 4, 6 and 2 rows: three lr scales per matrix.
  runtime::MatrixPlan plan;
  plan.batch = 3, plan.rows = 12, plan.cols = 30;
  plan.blocks = {{0, 4}, {4, 6}, {10, 2}};
  const int64_t count = plan.batch * plan.rows * plan.cols;
  using Run = void(void*, const float*, const double*, double, double, long long, long long, long long, long long, unsigned, unsigned);
  for (DType type : {DType::F32, DType::BF16, DType::F16})
    for (bool per_row : {true, false}) {
      SCOPED_TRACE(std::string(to_string(type)) + (per_row ? " per-row steps" : " one step"));
      EmulatedKernel kernel(cuda::generate_muon_apply({scalar(type)}), "oj_muon_apply",
                            "void* p, const float* o, const double* row_step, double step, double decay, long long rows, long long cols, "
                            "long long first, long long count",
                            "static_cast<OJ_PARAM(0)>(p), o, row_step, step, decay, rows, cols, first, count");
      runtime::MuonGroupSettings muon;
      muon.lr = 0.0173;
      muon.weight_decay = 0.1;
      muon.lr_adjust = per_row ? runtime::LrAdjust::MatchRmsAdamW : runtime::LrAdjust::None;
      plan.blocks = per_row ? std::vector<runtime::MatrixBlock>{{0, 4}, {4, 6}, {10, 2}} : std::vector<runtime::MatrixBlock>{{0, 12}};
      const std::vector<double> o64 = random_values(count, random, 0.1);
      const std::vector<float> o(o64.begin(), o64.end());
      std::vector<double> steps(static_cast<size_t>(plan.rows));
      for (const runtime::MatrixBlock& block : plan.blocks)
        for (int64_t r = block.row_offset; r < block.row_offset + block.rows; ++r)
          steps[static_cast<size_t>(r)] = muon.lr * runtime::lr_scale(muon.lr_adjust, block.rows, plan.cols);
      // The whole parameter, and a ZeRO slice that starts and ends inside rows of different
      // blocks and matrices (the kernel finds each element's row from `first`).
      for (const auto& [lo, hi] : {std::pair<int64_t, int64_t>{0, count}, std::pair<int64_t, int64_t>{137, 811}}) {
        SCOPED_TRACE("elements [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
        std::vector<unsigned char> p_kernel = stored(type, random_values(count, random, 0.05)), p_rules = p_kernel;
        const int64_t size = runtime::dtype_bytes(type);
        kernel.function<Run>()(p_kernel.data() + lo * size, o.data() + lo, per_row ? steps.data() : nullptr, steps[0], 1.0 - muon.lr * muon.weight_decay,
                               plan.rows, plan.cols, lo, hi - lo, kGrid, kBlock);
        runtime::apply_muon(muon, plan, type, p_rules.data(), o.data(), lo, hi);
        EXPECT_EQ(p_kernel, p_rules);
      }
    }
}

// The ZeRO step's element-wise kernels (runtime/zero/distributed_optimizer.h on device memory):
// accumulation, the average and the conversions give the bits of the host loops they replace.
TEST(CudaElementwise, ZeroStepKernelsMatchTheHostLoopsBitForBit) {
  if (!have_host_compiler()) GTEST_SKIP() << "no host c++ for the emulation";
  std::mt19937 random(std::random_device{}());
  const int64_t count = 1000;
  for (DType grad : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(to_string(grad));
    using Accumulate = void(const void*, float*, long long, unsigned, unsigned);
    EmulatedKernel kernel(cuda::generate_accumulate(scalar(grad)), "oj_accumulate", "const void* g, float* acc, long long count",
                          "static_cast<OJ_PARAM(0)>(g), acc, count");
    const std::vector<unsigned char> g = stored(grad, random_values(count, random, 1.0));
    const std::vector<double> a64 = random_values(count, random, 3.0);
    std::vector<float> acc_kernel(a64.begin(), a64.end()), acc_host = acc_kernel;
    kernel.function<Accumulate>()(g.data(), acc_kernel.data(), count, kGrid, kBlock);
    for (int64_t i = 0; i < count; ++i) acc_host[static_cast<size_t>(i)] += static_cast<float>(runtime::load_element(grad, g.data(), i));
    EXPECT_EQ(std::memcmp(acc_kernel.data(), acc_host.data(), count * 4), 0) << "accumulate";
  }
  {
    using Divide = void(float*, float, long long, unsigned, unsigned);
    EmulatedKernel kernel(cuda::generate_divide(), "oj_divide", "float* x, float divisor, long long count", "x, divisor, count");
    const std::vector<double> x64 = random_values(count, random, 2.0);
    for (float world : {2.0f, 3.0f, 7.0f}) {  // 3 and 7: the quotient is inexact, so x·(1/world) would differ
      std::vector<float> x_kernel(x64.begin(), x64.end()), x_host = x_kernel;
      kernel.function<Divide>()(x_kernel.data(), world, count, kGrid, kBlock);
      for (float& value : x_host) value /= world;
      EXPECT_EQ(std::memcmp(x_kernel.data(), x_host.data(), count * 4), 0) << "divide by " << world;
    }
  }
  // The clipping norm's sum of squares: each thread's partial is the f64 sum, in order, of the
  // squares of its grid-stride elements (bit for bit: no FMA), every thread writes one (those
  // without elements a zero), and their sum is the f64 sum of squares (to rounding order).
  {
    using SumSquares = void(const float*, double*, long long, unsigned, unsigned);
    EmulatedKernel kernel(cuda::generate_sum_squares(), "oj_sum_squares", "const float* x, double* partials, long long count", "x, partials, count");
    for (const size_t n : {static_cast<size_t>(count), size_t{5}}) {  // 5: most threads get no element
      const std::vector<double> x64 = random_values(n, random, 3.0);
      const std::vector<float> x(x64.begin(), x64.end());
      std::vector<double> partials(kGrid * kBlock, -1.0);
      kernel.function<SumSquares>()(x.data(), partials.data(), static_cast<long long>(n), kGrid, kBlock);
      double total = 0.0, direct = 0.0;
      for (size_t t = 0; t < partials.size(); ++t) {
        double expected = 0.0;
        for (size_t i = t; i < n; i += partials.size()) expected += static_cast<double>(x[i]) * static_cast<double>(x[i]);
        EXPECT_EQ(std::bit_cast<uint64_t>(partials[t]), std::bit_cast<uint64_t>(expected)) << "thread " << t << " of " << partials.size() << ", " << n << " elements";
        total += partials[t];
      }
      for (float v : x) direct += static_cast<double>(v) * static_cast<double>(v);
      EXPECT_NEAR(total, direct, 1e-12 * direct) << n << " elements";
    }
  }
  // The conversions the step uses: parameters into the f32 gather buffer and back.
  for (const auto& [from, to] : {std::pair{DType::F32, DType::F32}, std::pair{DType::BF16, DType::F32}, std::pair{DType::F16, DType::F32},
                                 std::pair{DType::F32, DType::BF16}, std::pair{DType::F32, DType::F16}}) {
      SCOPED_TRACE(std::string(to_string(from)) + " to " + to_string(to));
      using Convert = void(const void*, void*, long long, unsigned, unsigned);
      EmulatedKernel kernel(cuda::generate_convert(scalar(from), scalar(to)), "oj_convert", "const void* s, void* d, long long count",
                            "static_cast<OJ_PARAM(0)>(s), static_cast<OJ_PARAM(1)>(d), count");
      const std::vector<unsigned char> source = stored(from, random_values(count, random, 100.0));
      std::vector<unsigned char> d_kernel(static_cast<size_t>(count * runtime::dtype_bytes(to)), 0xAB), d_host = d_kernel;
      kernel.function<Convert>()(source.data(), d_kernel.data(), count, kGrid, kBlock);
      for (int64_t i = 0; i < count; ++i) runtime::store_element(to, d_host.data(), i, runtime::load_element(from, source.data(), i));
      EXPECT_EQ(d_kernel, d_host);
    }
}

TEST(CudaElementwise, AdamWKernelsMatchTheUpdateRulesBitForBit) {
  if (!have_host_compiler()) GTEST_SKIP() << "no host c++ for the emulation";
  std::mt19937 random(std::random_device{}());
  const int64_t count = 777;
  using Run = void(const void*, float*, float*, void*, double, double, double, double, double, double, double, double, long long, unsigned, unsigned);
  for (DType grad : {DType::F32, DType::BF16})
    for (DType type : {DType::F32, DType::BF16, DType::F16})
      for (bool moonlight : {false, true}) {
        SCOPED_TRACE(std::string(to_string(grad)) + " grad, " + to_string(type) + " parameter, " + (moonlight ? "moonlight" : "standard"));
        EmulatedKernel kernel(cuda::generate_adamw({scalar(grad), scalar(type), moonlight}), "oj_adamw",
                              "const void* g, float* m, float* v, void* p, double beta1, double beta2, double lr, double bias1, double bias2, double eps, "
                              "double scale, double decay, long long count",
                              "static_cast<OJ_PARAM(0)>(g), m, v, static_cast<OJ_PARAM(3)>(p), beta1, beta2, lr, bias1, bias2, eps, scale, decay, count");
        runtime::AdamGroupSettings adam;
        adam.lr = 3e-3, adam.beta1 = 0.9, adam.beta2 = 0.95, adam.eps = 1e-6, adam.weight_decay = 0.05;
        adam.formula = moonlight ? runtime::AdamFormula::Moonlight : runtime::AdamFormula::Standard;
        const int64_t step = 3;
        const std::vector<unsigned char> g = stored(grad, random_values(count, random, 0.01));
        std::vector<float> g32(count);
        for (int64_t i = 0; i < count; ++i) g32[static_cast<size_t>(i)] = static_cast<float>(runtime::load_element(grad, g.data(), i));
        const std::vector<double> m64 = random_values(count, random, 0.01), v64 = random_values(count, random, 1e-4);
        std::vector<float> m_kernel(m64.begin(), m64.end()), v_kernel(count), m_rules, v_rules;
        for (int64_t i = 0; i < count; ++i) v_kernel[static_cast<size_t>(i)] = static_cast<float>(std::abs(v64[static_cast<size_t>(i)]));
        m_rules = m_kernel, v_rules = v_kernel;
        std::vector<unsigned char> p_kernel = stored(type, random_values(count, random, 0.05)), p_rules = p_kernel;
        const double t = static_cast<double>(step), bias1 = 1.0 - std::pow(adam.beta1, t), bias2 = 1.0 - std::pow(adam.beta2, t);
        kernel.function<Run>()(g.data(), m_kernel.data(), v_kernel.data(), p_kernel.data(), adam.beta1, adam.beta2, adam.lr, bias1, bias2, adam.eps,
                               adam.lr * std::sqrt(bias2) / bias1, 1.0 - adam.lr * adam.weight_decay, count, kGrid, kBlock);
        runtime::adam_step(adam, step, g32.data(), m_rules.data(), v_rules.data(), type, p_rules.data(), 0, count);
        EXPECT_EQ(std::memcmp(m_kernel.data(), m_rules.data(), count * 4), 0) << "exp_avg";
        EXPECT_EQ(std::memcmp(v_kernel.data(), v_rules.data(), count * 4), 0) << "exp_avg_sq";
        EXPECT_EQ(p_kernel, p_rules) << "parameter";
      }
}

// f64 → bf16 / f16 in one rounding: values a hair above or below a tie, which a detour through
// f32 (to nearest) turns into the exact tie and then rounds to even, the wrong way half the time.
// The device optimizer's non-finite check (runtime/muon/memory_space.h): the flag is set exactly
// when an element is a NaN or an infinity, in each storage type, wherever it is (the grid-stride
// loop's every wrap), and never cleared by the finite elements of a later launch.
TEST(CudaElementwise, NonFiniteCheckFlagsExactlyTheNaNsAndInfinities) {
  if (!have_host_compiler()) GTEST_SKIP() << "no host c++ for the emulation";
  std::mt19937 random(std::random_device{}());
  const int64_t count = 1000;
  using Run = void(const void*, unsigned*, long long, unsigned, unsigned);
  for (DType grad : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(to_string(grad));
    EmulatedKernel kernel(cuda::generate_nonfinite_check(scalar(grad)), "oj_nonfinite", "const void* g, unsigned* flag, long long count",
                          "static_cast<OJ_PARAM(0)>(g), flag, count");
    std::vector<double> values = random_values(count, random, 1.0);
    values[5] = 65000.0;  // large but finite in every type
    unsigned flag = 0;
    std::vector<unsigned char> g = stored(grad, values);
    kernel.function<Run>()(g.data(), &flag, count, kGrid, kBlock);
    EXPECT_EQ(flag, 0u) << "finite values flagged";
    for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL})
      for (int64_t where : {int64_t{0}, int64_t{500}, count - 1}) {
        std::vector<double> poisoned = values;
        poisoned[static_cast<size_t>(where)] = bad;
        g = stored(grad, poisoned);
        flag = 0;
        kernel.function<Run>()(g.data(), &flag, count, kGrid, kBlock);
        EXPECT_EQ(flag, 1u) << bad << " at " << where;
      }
    g = stored(grad, values);
    kernel.function<Run>()(g.data(), &flag, count, kGrid, kBlock);
    EXPECT_EQ(flag, 1u) << "a finite launch cleared the flag";
  }
}

TEST(CudaElementwise, SixteenBitStoresRoundOnceFromFloat64) {
  if (!have_host_compiler()) GTEST_SKIP() << "no host c++ for the emulation";
  using Run = void(const double*, unsigned short*, unsigned short*, long long, unsigned, unsigned);
  EmulatedKernel kernel("#include \"orthojit_device.cuh\"\nvoid oj_convert(const double* x, unsigned short* b, unsigned short* h, long long n) {\n"
                        "  for (long long i = 0; i < n; ++i) { b[i] = oj::f64_to_bf16(x[i]); h[i] = oj::f64_to_f16(x[i]); }\n}\n",
                        "oj_convert", "const double* x, unsigned short* b, unsigned short* h, long long n", "x, b, h, n");
  std::mt19937 random(std::random_device{}());
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<double> x;
  for (int i = 0; i < 4000; ++i) {
    const bool bf16 = i % 2 == 0;
    const int bits = bf16 ? 7 : 10;  // fraction bits
    const double value = std::ldexp(std::floor(std::ldexp(mantissa(random), bits)), exponent(random) - bits);  // on the grid
    const double ulp = std::ldexp(1.0, std::ilogb(value) - bits);
    const double hair = ulp * std::ldexp(1.0, -30) * (i % 4 < 2 ? 1 : -1);  // below f32's resolution at the tie
    x.push_back((i % 8 < 4 ? 1 : -1) * (value + ulp / 2 + hair));
  }
  x.push_back(0.0), x.push_back(-0.0), x.push_back(1e-45), x.push_back(65504.0), x.push_back(1e300), x.push_back(std::nan(""));
  std::vector<unsigned short> b(x.size()), h(x.size());
  kernel.function<Run>()(x.data(), b.data(), h.data(), static_cast<long long>(x.size()), 1, 1);
  int detour_differs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE(x[i]);
    unsigned char expected_b[2], expected_h[2], detour[2];
    runtime::store_element(DType::BF16, expected_b, 0, x[i]);
    runtime::store_element(DType::F16, expected_h, 0, x[i]);
    if (std::isnan(x[i])) continue;  // NaN payloads are not part of the contract
    EXPECT_EQ(std::memcmp(&b[i], expected_b, 2), 0) << "bf16";
    EXPECT_EQ(std::memcmp(&h[i], expected_h, 2), 0) << "f16";
    runtime::store_element(DType::BF16, detour, 0, static_cast<double>(static_cast<float>(x[i])));
    detour_differs += std::memcmp(detour, expected_b, 2) != 0;
  }
  EXPECT_GT(detour_differs, 100);  // the inputs do hit the double-rounding cases
}

}  // namespace
}  // namespace orthojit
