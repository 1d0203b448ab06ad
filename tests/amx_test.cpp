// The AMX-BF16 engine: detection and its fallbacks, the generated kernel's instructions, and the
// GEMM driver's AMX path (packing, tile shapes, remainders along M, N and K, triangular products,
// the epilogue α·AB + β·C + γ·I, threads) against a double-precision product of the same bf16
// values, judged per 16x16 tile. The driver tests run the emulated kernels on every machine (the
// same generated code with each tile instruction a call to amx_emulator.cpp, which follows the
// Intel SDM's operation sections) and the native kernels where this process may use AMX.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "autotune/error_measure.h"
#include "autotune/search_space.h"
#include "cpu/amx_codegen.h"
#include "cpu/amx_emulator.h"
#include "cpu/amx_packing.h"
#include "cpu/amx_self_check.h"
#include "cpu/bf16_engine.h"
#include "cpu/cpu_isa.h"
#include "cpu/element_types.h"
#include "cpu/epilogue_codegen.h"
#include "cpu/gemm_driver.h"
#include "cpu/kernel_cache.h"
#include "cpu/thread_pool.h"
#include "kernels/program_library.h"
#include "reference/random_matrix.h"
#include "runtime/orthogonalize.h"
#include "test_support.h"
#include "support/host_cpu.h"

namespace orthojit::cpu {
namespace {

// ---- detection ---------------------------------------------------------------------------------

AmxProbe full_probe() {
  AmxProbe probe;
  probe.amx_tile = probe.amx_bf16 = probe.avx512bf16 = probe.xcr0_tile_state = true;
  probe.permission_error = 0;
  probe.permission_in_mask = true;
  return probe;
}

TEST(AmxDetection, UsableOnlyWithCpuidXcr0AndThePermission) {
  EXPECT_TRUE(evaluate_amx(full_probe()).usable);
  AmxProbe hidden = full_probe();
  hidden.amx_tile = false;  // a hypervisor that hides the tile unit
  EXPECT_FALSE(evaluate_amx(hidden).usable);
  EXPECT_NE(evaluate_amx(hidden).reason.find("AMX-TILE"), std::string::npos);
  AmxProbe no_bf16 = full_probe();
  no_bf16.amx_bf16 = false;
  EXPECT_NE(evaluate_amx(no_bf16).reason.find("AMX-BF16"), std::string::npos);
  AmxProbe os_off = full_probe();
  os_off.xcr0_tile_state = false;
  EXPECT_NE(evaluate_amx(os_off).reason.find("XCR0"), std::string::npos);
  AmxProbe not_asked = full_probe();
  not_asked.permission_error = -1;
  EXPECT_FALSE(evaluate_amx(not_asked).usable);
  AmxProbe unlisted = full_probe();
  unlisted.permission_in_mask = false;
  EXPECT_FALSE(evaluate_amx(unlisted).usable);
}

// A refused permission (what ORTHOJIT_AMX_PERMISSION=refuse simulates for the whole process).
TEST(AmxDetection, RefusedPermissionFallsBackAndSaysWhy) {
  AmxProbe refused = full_probe();
  refused.permission_error = EPERM;
  refused.permission_in_mask = false;
  const AmxAvailability availability = evaluate_amx(refused);
  EXPECT_FALSE(availability.usable);
  EXPECT_NE(availability.reason.find("refused"), std::string::npos) << availability.reason;
  EXPECT_NE(availability.reason.find("ARCH_REQ_XCOMP_PERM"), std::string::npos) << availability.reason;
  AmxProbe old_kernel = full_probe();
  old_kernel.permission_error = EINVAL;
  EXPECT_NE(evaluate_amx(old_kernel).reason.find("5.16"), std::string::npos);
}

TEST(AmxDetection, TheAmxPathExistsExactlyWhereTheProcessMayUseIt) {
  const bool usable = amx_availability().usable;
  // (and the tile kernels' self-check: AmxSelfCheck.TheProcessCheckDecidesTheAmxPath says why it failed)
  EXPECT_EQ(host_supports(CpuIsa::AmxBf16), usable && host_supports(CpuIsa::Avx512Bf16) && amx_self_check().bf16_passed);
  const std::vector<CpuIsa> paths = supported_isas();
  EXPECT_EQ(std::count(paths.begin(), paths.end(), CpuIsa::AmxBf16), host_supports(CpuIsa::AmxBf16) ? 1 : 0);
  if (!host_supports(CpuIsa::AmxBf16)) {
    EXPECT_FALSE(unsupported_reason(CpuIsa::AmxBf16).empty());
    EXPECT_NE(best_host_isa(), CpuIsa::AmxBf16);
  } else if (std::getenv("ORTHOJIT_CPU_ISA") == nullptr) {
    EXPECT_EQ(best_host_isa(), CpuIsa::AmxBf16) << "the default path is AMX where the process may use it";
  }
  EXPECT_EQ(parse_cpu_isa("amx"), CpuIsa::AmxBf16);
  EXPECT_EQ(to_string(CpuIsa::AmxBf16), "amx");
}

// The CLI in child processes: the environment decides before anything is cached.
std::string run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return output;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  pclose(pipe);
  return output;
}

#ifdef ORTHOJIT_CLI_PATH
TEST(AmxDetection, InfoSaysWhetherAmxIsUsableAndTheEnvironmentForcesOtherPaths) {
  const std::string info = run_command(std::string(ORTHOJIT_CLI_PATH) + " info");
  ASSERT_NE(info.find("amx:"), std::string::npos) << info;
  if (host_supports(CpuIsa::AmxBf16)) EXPECT_NE(info.find("amx:        usable"), std::string::npos) << info;
  else EXPECT_NE(info.find("amx:        not usable: "), std::string::npos) << info;
  const std::string json = run_command(std::string(ORTHOJIT_CLI_PATH) + " info --json");
  EXPECT_NE(json.find(std::string("\"usable\": ") + (host_supports(CpuIsa::AmxBf16) ? "true" : "false")), std::string::npos) << json;
  // The self-check's outcome (amx_self_check.h): "not run" here without AMX, its detail with it.
  EXPECT_NE(json.find("\"self_check\""), std::string::npos) << json;
  EXPECT_NE(json.find(amx_self_check().detail), std::string::npos) << json;
  // ORTHOJIT_CPU_ISA forces the non-AMX path (generic runs everywhere).
  const std::string forced = run_command("ORTHOJIT_CPU_ISA=generic " + std::string(ORTHOJIT_CLI_PATH) + " info");
  EXPECT_NE(forced.find("(default generic;"), std::string::npos) << forced;
  // A simulated refusal: AMX is not usable and the default is the strongest FMA path.
  const std::string refused = run_command("ORTHOJIT_AMX_PERMISSION=refuse " + std::string(ORTHOJIT_CLI_PATH) + " info");
  EXPECT_NE(refused.find("amx:        not usable: "), std::string::npos) << refused;
  EXPECT_EQ(refused.find("(default amx;"), std::string::npos) << refused;
  if (host_cpu().amx_tile && host_cpu().amx_bf16 && host_cpu().xcr0_tile_state && host_cpu().avx512bf16) {
    EXPECT_NE(refused.find("refused"), std::string::npos) << refused;
  }
}
#endif

// ---- the generated kernel ------------------------------------------------------------------------

MicrokernelSpec amx_kernel(int64_t kc, int m_valid, int n_valid, bool emulated, bool fp16 = false) {
  MicrokernelSpec spec;
  spec.amx_fp16 = fp16;
  spec.isa = CpuIsa::AmxBf16;
  spec.kc = kc;
  spec.amx = true;
  spec.m_valid = m_valid;
  spec.n_valid = n_valid;
  spec.amx_emulated = emulated;
  return spec;
}

int count_of(const std::string& text, const std::string& pattern) {
  const std::regex expression(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), expression), std::sregex_iterator()));
}

TEST(AmxKernel, CompilesToTileInstructionsWithoutSpills) {
  // kc = 384: 12 steps of 4 TDPBF16PS in the zeroing and in the accumulating loop, and the first
  // step once more in each (the panel transition: a panel's first step with the previous panel's
  // stores between its products). LLVM may merge identical tails of the two loops (branch folding),
  // so the counts are bounds: every step of both loops, at most the two extra first steps.
  for (auto [m_valid, n_valid, products] : {std::tuple{32, 32, 4}, std::tuple{32, 5, 2}, std::tuple{9, 32, 2}, std::tuple{7, 3, 1}, std::tuple{17, 31, 4}}) {
    SCOPED_TRACE(std::to_string(m_valid) + "x" + std::to_string(n_valid));
    const std::string assembly = amx_kernel_assembly(amx_kernel(384, m_valid, n_valid, false));
    EXPECT_EQ(count_of(assembly, "\\bldtilecfg\\b"), 1) << assembly;
    EXPECT_GE(count_of(assembly, "\\btilerelease\\b"), 1);
    EXPECT_GE(count_of(assembly, "\\btdpbf16ps\\b"), 2 * 12 * products);
    EXPECT_LE(count_of(assembly, "\\btdpbf16ps\\b"), 2 * (12 + 1) * products);
    EXPECT_GE(count_of(assembly, "\\btilezero\\b"), products);
    EXPECT_GE(count_of(assembly, "\\btilestored\\b"), 2 * products);
    // A tile spill is a tilestored to the stack frame; the C stores go through the argument pointer.
    EXPECT_EQ(count_of(assembly, "tilestored\\s+%tmm[0-7], [-0-9]*\\(%rsp"), 0) << assembly;
  }
  {
    // The default K block (512: 16 unrolled steps, the first twice): no spills, B loaded with the
    // streaming hint.
    const std::string assembly = amx_kernel_assembly(amx_kernel(512, 32, 32, false));
    EXPECT_GE(count_of(assembly, "\\btdpbf16ps\\b"), 2 * 16 * 4);
    EXPECT_LE(count_of(assembly, "\\btdpbf16ps\\b"), 2 * (16 + 1) * 4);
    EXPECT_GE(count_of(assembly, "\\btileloaddt1\\b"), 2 * 16 * 2);
    EXPECT_EQ(count_of(assembly, "tilestored\\s+%tmm[0-7], [-0-9]*\\(%rsp"), 0);
  }
  EXPECT_THROW(amx_kernel_assembly(amx_kernel(100, 32, 32, false)), std::logic_error);  // kc not a multiple of 32
  EXPECT_THROW(amx_kernel_assembly(amx_kernel(64, 33, 32, false)), std::logic_error);
}

// ---- packing -------------------------------------------------------------------------------------

TEST(AmxPacking, PlacesKPairsTheWayTheTilesReadThem) {
  // B's elements carry distinct bit patterns (copied as they are): where each lands is checked.
  const int64_t k = 40, n = 37;
  std::vector<uint16_t> b(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) b[static_cast<size_t>(i * n + j)] = static_cast<uint16_t>(i * 64 + j + 1);  // bit patterns, copied as is
  const MatrixView view{b.data(), ScalarType::BF16, k, n, n, 1};
  const int64_t kc = amx_padded_k(k);
  std::vector<uint16_t> packed(static_cast<size_t>(2 * amx_panel_elements(kc)), 0xffff);
  pack_amx_b(view, 0, k, kc, 0, n, 0, 2, packed.data());
  for (int64_t panel = 0; panel < 2; ++panel)
    for (int64_t kk = 0; kk < kc; ++kk)
      for (int64_t c = 0; c < 32; ++c) {
        const int64_t s = kk / 32, pair = (kk % 32) / 2, e = kk % 2, t = c / 16, column = panel * 32 + c;
        const size_t at = static_cast<size_t>(panel * amx_panel_elements(kc) + ((s * 2 + t) * 16 + pair) * 32 + (c % 16) * 2 + e);
        const uint16_t expected = kk < k && column < n ? b[static_cast<size_t>(kk * n + column)] : 0;
        ASSERT_EQ(packed[at], expected) << "k " << kk << " column " << column;
      }
  // The transposed form (Xᵀ as B) packs the same panel.
  std::vector<uint16_t> bt(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) bt[static_cast<size_t>(j * k + i)] = b[static_cast<size_t>(i * n + j)];
  const MatrixView transposed{bt.data(), ScalarType::BF16, k, n, 1, k};
  std::vector<uint16_t> packed_t(packed.size(), 0xffff);
  pack_amx_b(transposed, 0, k, kc, 0, n, 0, 2, packed_t.data());
  EXPECT_EQ(packed, packed_t);
  // f32 sources are rounded to bf16 while packing (ties to even).
  std::vector<float> f32 = {1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-7f};  // ties (half a bf16 ulp of 2^-7 past): down to even, up to even
  const MatrixView a_view{f32.data(), ScalarType::F32, 1, 2, 2, 1};
  std::vector<uint16_t> packed_a(static_cast<size_t>(amx_panel_elements(32)), 0xffff);
  pack_amx_a(a_view, 0, 2, 32, 0, 1, packed_a.data());
  EXPECT_EQ(packed_a[0], 0x3f80);
  EXPECT_EQ(packed_a[1], 0x3f82);
  EXPECT_EQ(packed_a[2], 0);
}

// ---- the driver's AMX path vs a double product -------------------------------------------------

// Small blocks for the AMX path: K blocks of amx_kc = kc, so that several K blocks (the C tiles
// reloaded from the task's accumulator) and a remainder occur on small products, and a sweep per
// column block (the default blocking packs every column block of these products in one sweep).
GemmBlocking small_blocks(int64_t mc, int64_t kc, int64_t nc) {
  GemmBlocking blocking{mc, kc, nc};
  blocking.amx_kc = kc;
  blocking.amx_sweep_bytes = 1;  // one column block per sweep: the packed-B offsets of later sweeps
  return blocking;
}

// A fresh seed per run (printed by each test's trace), or ORTHOJIT_TEST_SEED's to replay one.
uint64_t fresh_seed() {
  if (const char* replay = std::getenv("ORTHOJIT_TEST_SEED")) return std::strtoull(replay, nullptr, 10);
  return (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
}

// 16-bit storage values (bf16, or f16 for the AMX-FP16 kernel) as their bits.
uint16_t bits_of(float value, ScalarType type) { return type == ScalarType::F16 ? from_float<F16>(value).bits : from_float<Bf16>(value).bits; }
double value_of(uint16_t bits, ScalarType type = ScalarType::BF16) {
  return type == ScalarType::F16 ? to_float(F16{bits}) : to_float(Bf16{bits});
}
std::vector<uint16_t> random_16(int64_t count, std::mt19937_64& random, ScalarType type = ScalarType::BF16) {
  std::normal_distribution<float> normal;
  std::vector<uint16_t> values(static_cast<size_t>(count));
  for (auto& value : values) value = bits_of(normal(random), type);
  return values;
}

struct Product {
  int64_t m, n, k;
  bool transpose_a, transpose_b;  // A stored (k, m) and viewed transposed; B stored (n, k)
  bool with_c;
  float alpha, beta, gamma;
  bool triangular;  // A·Aᵀ computed as its upper triangle and mirrored
};

// The kernels the driver runs: emulated (any machine) or native (AMX machines). Every spec it
// asks for must be one microkernels_for listed (the executable compiles those before the run).
struct KernelSource {
  bool emulated;
  std::vector<MicrokernelSpec> listed;
  GemmDriver driver(const GemmBlocking& blocking) {
    return GemmDriver(CpuIsa::AmxBf16, blocking, [this](const MicrokernelSpec& wanted) -> MicrokernelFunction {
      EXPECT_TRUE(wanted.amx) << wanted.name();
      EXPECT_TRUE(std::any_of(listed.begin(), listed.end(), [&](const MicrokernelSpec& spec) { return spec.name() == wanted.name(); }))
          << wanted.name() << " was not listed by microkernels_for";
      MicrokernelSpec spec = wanted;
      spec.amx_emulated = emulated;
      return get_microkernel(spec).function;
    });
  }
};

struct Result {
  std::vector<float> d;
  double tile_error = 0, frobenius = 0;
  std::string where;
};

// operands: BF16, or F16 (AMX-FP16: blocking.amx_fp16 must be set).
Result run_product(const Product& p, const GemmBlocking& blocking, bool emulated, ThreadPool* pool, uint64_t seed, EpilogueFunction epilogue,
                   ScalarType d_type = ScalarType::F32, ScalarType operands = ScalarType::BF16) {
  std::mt19937_64 random(seed);
  const int64_t n = p.triangular ? p.m : p.n;
  const std::vector<uint16_t> a = random_16(p.m * p.k, random, operands);
  const std::vector<uint16_t> b_values = p.triangular ? std::vector<uint16_t>() : random_16(p.k * n, random, operands);
  std::vector<float> c(static_cast<size_t>(p.m * n));
  std::normal_distribution<float> normal;
  for (auto& value : c) value = normal(random);
  if (p.triangular)  // a symmetric C, as the symmetric products' C is
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < i; ++j) c[static_cast<size_t>(i * n + j)] = c[static_cast<size_t>(j * n + i)];
  auto a_at = [&](int64_t i, int64_t kk) { return value_of(a[static_cast<size_t>(i * p.k + kk)], operands); };
  auto b_at = [&](int64_t kk, int64_t j) { return p.triangular ? a_at(j, kk) : value_of(b_values[static_cast<size_t>(kk * n + j)], operands); };
  // Storage in the requested forms.
  std::vector<uint16_t> a_store(a.size()), b_store(static_cast<size_t>(p.k * n));
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t kk = 0; kk < p.k; ++kk) a_store[static_cast<size_t>(p.transpose_a ? kk * p.m + i : i * p.k + kk)] = a[static_cast<size_t>(i * p.k + kk)];
  for (int64_t kk = 0; kk < p.k; ++kk)
    for (int64_t j = 0; j < n; ++j) b_store[static_cast<size_t>(p.transpose_b ? j * p.k + kk : kk * n + j)] = bits_of(static_cast<float>(b_at(kk, j)), operands);
  GemmProblem problem;
  problem.a = p.transpose_a ? MatrixView{a_store.data(), operands, p.k, p.m, p.m, 1}.transposed() : MatrixView{a_store.data(), operands, p.m, p.k, p.k, 1};
  problem.b = p.transpose_b ? MatrixView{b_store.data(), operands, n, p.k, p.k, 1}.transposed() : MatrixView{b_store.data(), operands, p.k, n, n, 1};
  if (p.with_c) problem.c = MatrixView{c.data(), ScalarType::F32, p.m, n, n, 1};
  Result result;
  result.d.assign(static_cast<size_t>(p.m * n), std::nanf(""));  // poisoned
  std::vector<uint16_t> d16(static_cast<size_t>(p.m * n), 0x7fc1);
  problem.d = d_type == ScalarType::F32 ? MatrixView{result.d.data(), ScalarType::F32, p.m, n, n, 1} : MatrixView{d16.data(), d_type, p.m, n, n, 1};
  problem.alpha = p.alpha;
  problem.beta = p.with_c ? p.beta : 0.0f;
  problem.gamma = p.gamma;
  problem.triangular = p.triangular;
  problem.epilogue = epilogue;
  KernelSource source{emulated, microkernels_for(CpuIsa::AmxBf16, blocking, problem.a, problem.b)};
  source.driver(blocking).run(problem, pool);
  if (d_type != ScalarType::F32)
    for (size_t i = 0; i < d16.size(); ++i) result.d[i] = static_cast<float>(value_of(d16[i], d_type));
  // The double product of the same bf16 values, with the epilogue in double.
  std::vector<double> reference(static_cast<size_t>(p.m * n));
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) sum += a_at(i, kk) * b_at(kk, j);
      double value = p.alpha * sum;
      if (p.with_c) value += p.beta * c[static_cast<size_t>(i * n + j)];
      if (i == j) value += p.gamma;
      reference[static_cast<size_t>(i * n + j)] = value;
    }
  const autotune::ErrorMeasure measure = autotune::measure_error(result.d.data(), reference.data(), p.m, n, 1);
  result.tile_error = measure.finite ? measure.tile : INFINITY;
  result.frobenius = measure.frobenius;
  result.where = "rows " + std::to_string(measure.tile_row) + ", cols " + std::to_string(measure.tile_col);
  return result;
}

const Product kProducts[] = {
    // m, n, k, Aᵀ, Bᵀ, C, α, β, γ, triangular
    {1, 1, 1, false, false, false, 1, 0, 0, false},       // a 1x1 microtile, k padded from 1 to 32
    {7, 300, 13, false, false, true, 2.0f, -0.5f, 0, false},
    {32, 32, 32, false, false, false, 1, 0, 0, false},    // exactly one microtile and one k step
    {33, 47, 65, false, true, true, 1.5f, 0.25f, 3.0f, false},  // one past in M, N and K; B = Xᵀ
    {129, 517, 300, false, false, true, 1, 1, -2.0f, false},    // several K blocks with a remainder, column blocks
    {300, 64, 129, true, false, false, -1.0f, 0, 0, false},     // A = Xᵀ
    {17, 1000, 31, false, false, true, 0.5f, 3.0f, 1.0f, false},
    {96, 96, 200, false, true, true, 1.0f, -1.0f, 1.0f, true},  // triangular with the epilogue
    {77, 77, 45, false, true, false, 1, 0, 0, true},             // triangular with edges
    {64, 64, 1000, false, true, true, 3.4445f, -4.7750f, 2.0315f, true},  // an NS-like Gram step
    {45, 70, 256, false, false, true, 1.0f, 0.5f, 0, false},    // whole tile steps, edges in M and N
    {70, 70, 1100, false, true, false, 1, 0, 0, true},          // X·Xᵀ, three K blocks of the default 512
};

// f32 output: the only error is the f32 accumulation (one rounding per k pair), far below bf16's.
// A sum of K products in f32 errs by at most K·2^-24 relative and typically √K·2^-24; the bound
// held with margin up to K = 1000 and grows linearly with K beyond (70x70x2112: 2.1e-5 seen).
constexpr double kF32OutputTileBound = 2e-5;
double f32_output_tile_bound(int64_t k) { return kF32OutputTileBound * std::max(1.0, static_cast<double>(k) / 1000.0); }

void check_all_products(bool emulated, const GemmBlocking& blocking, ThreadPool* pool, ScalarType operands = ScalarType::BF16) {
  const uint64_t seed = fresh_seed();
  for (const Product& p : kProducts) {
    SCOPED_TRACE((emulated ? "emulated " : "native ") + std::string(to_string(operands)) + " " + std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k) +
                 (p.triangular ? " triangular" : "") + " seed " + std::to_string(seed) + " blocking " + std::to_string(blocking.mc) + "/" +
                 std::to_string(blocking.kc) + "/" + std::to_string(blocking.nc));
    const Result result = run_product(p, blocking, emulated, pool, seed, nullptr, ScalarType::F32, operands);
    EXPECT_LT(result.tile_error, f32_output_tile_bound(p.k)) << "worst tile at " << result.where << ", Frobenius " << result.frobenius;
  }
}

TEST(AmxGemm, EmulatedKernelsMatchADoubleProductOnEveryRemainder) {
  check_all_products(true, small_blocks(64, 64, 64), nullptr);  // small blocks: K blocks, row and column blocks
  check_all_products(true, GemmBlocking{}, nullptr);             // the defaults
}

TEST(AmxGemm, NativeKernelsMatchADoubleProductOnEveryRemainder) {
  if (!host_supports(CpuIsa::AmxBf16)) GTEST_SKIP() << "AMX not usable here: " << unsupported_reason(CpuIsa::AmxBf16);
  ThreadPool pool(2);
  check_all_products(false, small_blocks(64, 64, 64), nullptr);
  check_all_products(false, GemmBlocking{}, nullptr);
  check_all_products(false, small_blocks(64, 96, 64), &pool);
}

TEST(AmxGemm, TheGeneratedEpilogueAndBf16OutputOnTheAmxPath) {
  const bool native = host_supports(CpuIsa::AmxBf16);
  const Product p = {129, 517, 300, false, true, true, 1.5f, -0.5f, 2.0f, false};
  const Product t = {100, 100, 150, false, true, true, 1.0f, 1.0f, -1.0f, true};
  for (const Product& product : {p, t})
    for (ScalarType d_type : {ScalarType::F32, ScalarType::BF16}) {
      EpilogueSpec spec;
      spec.isa = native ? CpuIsa::AmxBf16 : best_host_isa();
      spec.alpha = product.alpha;
      spec.beta = product.beta;
      spec.gamma = product.gamma;
      spec.has_c = true;
      spec.c_type = ScalarType::F32;
      spec.d_type = d_type;
      const EpilogueFunction epilogue = get_epilogue(spec).function;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(std::string(to_string(d_type)) + (product.triangular ? " triangular" : "") + " seed " + std::to_string(seed));
      const Result result = run_product(product, small_blocks(64, 128, 128), !native, nullptr, seed, epilogue, d_type);
      // bf16 output: one rounding of the result (2^-9 of |value|, a few times the tile's RMS at
      // most) dominates; a misplaced k pair or tile gives errors of order 1.
      EXPECT_LT(result.tile_error, d_type == ScalarType::F32 ? kF32OutputTileBound : 0.02) << result.where;
    }
}

// Threads and batches: 1 and 2 workers give identical bits (each element is accumulated in K
// order by one task), and independent products on concurrent threads (the batch form: one matrix
// per worker, each thread loading its own tile configuration) give the same bits as alone.
TEST(AmxGemm, IdenticalBitsForOneAndTwoThreadsAndConcurrentBatches) {
  const bool emulated = !host_supports(CpuIsa::AmxBf16);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ThreadPool pool(2);
  const GemmBlocking blocking = small_blocks(64, 96, 64);
  const Product p = {150, 230, 333, false, false, true, 1.0f, 0.5f, 1.0f, false};
  const Product t = {150, 150, 333, false, true, true, 1.0f, 0.5f, 1.0f, true};
  for (const Product& product : {p, t}) {
    const Result alone = run_product(product, blocking, emulated, nullptr, seed, nullptr);
    const Result two = run_product(product, blocking, emulated, &pool, seed, nullptr);
    EXPECT_EQ(0, std::memcmp(alone.d.data(), two.d.data(), alone.d.size() * sizeof(float)));
    std::vector<Result> batch(4);
    std::vector<std::thread> threads;
    for (size_t item = 0; item < batch.size(); ++item)
      threads.emplace_back([&, item] { batch[item] = run_product(product, blocking, emulated, nullptr, seed + item, nullptr); });
    for (auto& thread : threads) thread.join();
    for (size_t item = 0; item < batch.size(); ++item) {
      const Result single = run_product(product, blocking, emulated, nullptr, seed + item, nullptr);
      EXPECT_EQ(0, std::memcmp(single.d.data(), batch[item].d.data(), single.d.size() * sizeof(float))) << "batch item " << item;
    }
  }
}

// The forced non-AMX path: the same bf16 product on the avx512bf16 path (or whatever FMA path
// this CPU has) never asks for an AMX kernel.
TEST(AmxGemm, OtherPathsNeverUseTheTileKernels) {
  std::vector<uint16_t> a(64 * 64, 0x3f80), b(64 * 64, 0x3f80);
  const MatrixView av{a.data(), ScalarType::BF16, 64, 64, 64, 1}, bv{b.data(), ScalarType::BF16, 64, 64, 64, 1};
  std::vector<uint16_t> h(64 * 64, 0x3c00);  // f16 ones
  const MatrixView hv{h.data(), ScalarType::F16, 64, 64, 64, 1};
  for (CpuIsa isa : {CpuIsa::Generic, CpuIsa::Avx2Fma, CpuIsa::Avx512f, CpuIsa::Avx512Bf16}) {
    EXPECT_FALSE(uses_amx(isa, true, av, bv));
    EXPECT_FALSE(uses_amx(isa, true, hv, hv));
    for (const MicrokernelSpec& spec : microkernels_for(isa, GemmBlocking{}, av, bv)) EXPECT_FALSE(spec.amx);
  }
  EXPECT_TRUE(uses_amx(CpuIsa::AmxBf16, false, av, bv));
  std::vector<float> f(64 * 64);
  const MatrixView fv{f.data(), ScalarType::F32, 64, 64, 64, 1};
  EXPECT_FALSE(uses_amx(CpuIsa::AmxBf16, true, fv, bv)) << "f32 stays on FMAs";
  for (const MicrokernelSpec& spec : microkernels_for(CpuIsa::AmxBf16, GemmBlocking{}, fv, fv)) EXPECT_FALSE(spec.amx);
  // f16 goes on the tiles only with AMX-FP16 (TDPFP16PS), never mixed with bf16.
  EXPECT_FALSE(uses_amx(CpuIsa::AmxBf16, false, hv, hv)) << "f16 without AMX-FP16 stays on FMAs";
  EXPECT_TRUE(uses_amx(CpuIsa::AmxBf16, true, hv, hv));
  EXPECT_FALSE(uses_amx(CpuIsa::AmxBf16, true, hv, bv));
  for (const MicrokernelSpec& spec : microkernels_for(CpuIsa::AmxBf16, GemmBlocking{}, hv, hv)) EXPECT_FALSE(spec.amx);
  GemmBlocking fp16;
  fp16.amx_fp16 = true;
  for (const MicrokernelSpec& spec : microkernels_for(CpuIsa::AmxBf16, fp16, hv, hv)) EXPECT_TRUE(spec.amx && spec.amx_fp16) << spec.name();
  for (const MicrokernelSpec& spec : microkernels_for(CpuIsa::AmxBf16, fp16, av, bv)) EXPECT_TRUE(spec.amx && !spec.amx_fp16) << spec.name();
  // On a host without AMX, the best path runs the same bf16 product on FMAs.
  const CpuIsa best = best_host_isa();
  std::vector<float> d(64 * 64, -1);
  GemmProblem problem;
  problem.a = av;
  problem.b = bv;
  problem.d = {d.data(), ScalarType::F32, 64, 64, 64, 1};
  GemmDriver(best, GemmBlocking{}, [](const MicrokernelSpec& spec) { return get_microkernel(spec).function; }).run(problem, nullptr);
  EXPECT_EQ(d[0], 64.0f);
  EXPECT_EQ(d[64 * 64 - 1], 64.0f);
}

// AMX-FP16: the same driver and kernels on f16 pairs (TDPFP16PS), emulated on any machine and
// natively where the CPU has AMX-FP16; f16 operands are exact in f32 like bf16 ones, so the bound
// is the same f32-accumulation bound.
void check_f16_products(bool emulated) {
  GemmBlocking small = small_blocks(64, 64, 64), defaults;
  small.amx_fp16 = defaults.amx_fp16 = true;
  check_all_products(emulated, small, nullptr, ScalarType::F16);
  ThreadPool pool(2);
  check_all_products(emulated, defaults, &pool, ScalarType::F16);
}

TEST(AmxFp16Gemm, EmulatedKernelsMatchADoubleProductOnEveryRemainder) { check_f16_products(true); }

TEST(AmxFp16Gemm, NativeKernelsMatchADoubleProductOnEveryRemainder) {
  if (!host_supports(CpuIsa::AmxBf16) || !host_cpu().amx_fp16) GTEST_SKIP() << "AMX-FP16 not usable here";
  check_f16_products(false);
}

// ---- the self-check of the tile kernels (amx_self_check.h) ---------------------------------------

MicrokernelFunction emulated_kernel(MicrokernelSpec spec) {
  spec.amx_emulated = true;
  return get_microkernel(spec).function;
}

TEST(AmxSelfCheck, CorrectKernelsPassItInBf16AndF16) {
  const AmxSelfCheck check = run_amx_self_check(emulated_kernel, true);
  EXPECT_TRUE(check.ran);
  EXPECT_TRUE(check.bf16_passed) << check.detail;
  EXPECT_TRUE(check.fp16_checked);
  EXPECT_TRUE(check.fp16_passed) << check.detail;
  EXPECT_NE(check.detail.find("self-check passed"), std::string::npos) << check.detail;
}

// The faults real hardware could show if it read a tile differently from the emulator: a row of
// each microtile lost, one wrong element in one product, f16 pairs read as bf16.
TEST(AmxSelfCheck, WrongKernelsFailItAndSayWhere) {
  const AmxSelfCheck dropped_row = run_amx_self_check(
      [](const MicrokernelSpec& wanted) {
        MicrokernelSpec spec = wanted;
        if (spec.m_valid > 1) --spec.m_valid;
        return emulated_kernel(spec);
      },
      false);
  EXPECT_TRUE(dropped_row.ran);
  EXPECT_FALSE(dropped_row.bf16_passed);
  EXPECT_NE(dropped_row.detail.find("failed their self-check: bf16 56x88x150"), std::string::npos) << dropped_row.detail;

  // A short K: the last 32-pair step of every call skipped (kc one step less than asked).
  const AmxSelfCheck short_k = run_amx_self_check(
      [](const MicrokernelSpec& wanted) {
        MicrokernelSpec spec = wanted;
        if (spec.kc > 32) spec.kc -= 32;
        return emulated_kernel(spec);
      },
      false);
  EXPECT_FALSE(short_k.bf16_passed) << short_k.detail;
  EXPECT_NE(short_k.detail.find("times its f32-accumulation bound"), std::string::npos) << short_k.detail;

  // Only the f16 kernels wrong: bf16 stays on the tiles, f16 products go back to FMAs.
  const AmxSelfCheck f16_as_bf16 = run_amx_self_check(
      [](const MicrokernelSpec& wanted) {
        MicrokernelSpec spec = wanted;
        spec.amx_fp16 = false;  // TDPBF16PS on f16 pairs
        return emulated_kernel(spec);
      },
      true);
  EXPECT_TRUE(f16_as_bf16.bf16_passed) << f16_as_bf16.detail;
  EXPECT_FALSE(f16_as_bf16.fp16_passed);
  EXPECT_NE(f16_as_bf16.detail.find("AMX-FP16 kernels failed their self-check"), std::string::npos) << f16_as_bf16.detail;
}

TEST(AmxSelfCheck, TheProcessCheckDecidesTheAmxPath) {
  const AmxSelfCheck& check = amx_self_check();
  EXPECT_EQ(host_supports(CpuIsa::AmxBf16), host_executes(CpuIsa::AmxBf16) && check.bf16_passed) << check.detail;
  EXPECT_EQ(amx_fp16_usable(), host_supports(CpuIsa::AmxBf16) && host_cpu().amx_fp16 && check.fp16_passed);
  if (!host_executes(CpuIsa::AmxBf16)) {
    EXPECT_FALSE(check.ran);
    EXPECT_NE(check.detail.find("not run"), std::string::npos) << check.detail;
  } else if (std::getenv("ORTHOJIT_AMX_SELF_CHECK") == nullptr) {
    EXPECT_TRUE(check.ran);
    EXPECT_TRUE(check.bf16_passed) << "the native tile kernels fail on this machine: " << check.detail;
    if (host_cpu().amx_fp16) {
      EXPECT_TRUE(check.fp16_passed) << check.detail;
    }
  }
}

TEST(AmxFp16Kernel, CompilesToTdpfp16psAndItsEmulationKeepsDenormalInputs) {
  const std::string assembly = amx_kernel_assembly(amx_kernel(128, 32, 32, false, true));
  EXPECT_GE(count_of(assembly, "\\btdpfp16ps\\b"), 2 * 4 * 4) << assembly;
  EXPECT_EQ(count_of(assembly, "\\btdpbf16ps\\b"), 0);
  EXPECT_EQ(count_of(assembly, "tilestored\\s+%tmm[0-7], [-0-9]*\\(%rsp"), 0) << assembly;
  EXPECT_NE(amx_kernel(128, 32, 32, false, true).name(), amx_kernel(128, 32, 32, false).name());
  // One row, one pair: the smallest f16 denormal (2^-24) times 1, plus the smallest normal
  // (2^-14) times 2^-10: 2^-23 when denormal inputs are kept, as TDPFP16PS does (2^-24 if they
  // were treated as zero, TDPBF16PS's rule; anything else if the pairs were read as bf16).
  EmulatedTile c, a, b;
  orthojit_amx_emulated_tilezero(&c, 1, 4);
  const uint16_t a_bits[2] = {0x0001, 0x0400}, b_bits[2] = {0x3c00, 0x1400};  // 2^-24, 2^-14; 1, 2^-10
  orthojit_amx_emulated_tileloadd(&a, 1, 4, a_bits, 4);
  orthojit_amx_emulated_tileloadd(&b, 1, 4, b_bits, 4);
  orthojit_amx_emulated_tdpfp16ps(&c, &a, &b, 1, 4, 4);
  float out = 0;
  orthojit_amx_emulated_tilestored(&c, 1, 4, &out, 4);
  EXPECT_EQ(out, 0x1.0p-23f);
}

// One Newton–Schulz step as the executable runs it on the amx path, bf16 storage throughout:
// A = X·Xᵀ (triangular, B operand a transposed view), B = c·A·A + b·A (triangular, C = A in bf16),
// X' = B·X + a·X (C = X in bf16); each product against f64 from the stored operands it read.
// Emulated kernels here, native ones on AMX machines.
// `storage`: BF16, or F16 on AMX-FP16 (emulated unless the CPU has it).
void newton_schulz_step_on_tiles(ScalarType storage) {
  const bool fp16 = storage == ScalarType::F16;
  const bool emulated = !host_supports(CpuIsa::AmxBf16) || (fp16 && !host_cpu().amx_fp16);
  const int64_t m = 70, n = 300;
  const double ca = 3.4445, cb = -4.7750, cc = 2.0315;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(to_string(storage)) + " seed " + std::to_string(seed));
  std::mt19937_64 random(seed);
  std::vector<uint16_t> x = random_16(m * n, random, storage);
  for (auto& bits : x) bits = bits_of(static_cast<float>(value_of(bits, storage)) / std::sqrt(static_cast<float>(n)), storage);  // about unit rows
  std::vector<uint16_t> a(static_cast<size_t>(m * m)), b(a.size()), x_next(x.size());
  ThreadPool pool(2);
  GemmBlocking blocking = small_blocks(64, 128, 64);
  blocking.amx_fp16 = fp16;
  auto run = [&](MatrixView left, MatrixView right, std::optional<MatrixView> c, MatrixView d, float alpha, float beta, bool triangular) {
    GemmProblem problem;
    problem.a = left;
    problem.b = right;
    problem.c = c;
    problem.d = d;
    problem.alpha = alpha;
    problem.beta = c ? beta : 0.0f;
    problem.triangular = triangular;
    KernelSource source{emulated, microkernels_for(CpuIsa::AmxBf16, blocking, left, right)};
    EXPECT_TRUE(uses_amx(CpuIsa::AmxBf16, blocking.amx_fp16, left, right));
    source.driver(blocking).run(problem, &pool);
  };
  const MatrixView xv{x.data(), storage, m, n, n, 1};
  const MatrixView av{a.data(), storage, m, m, m, 1}, bv{b.data(), storage, m, m, m, 1};
  run(xv, xv.transposed(), std::nullopt, av, 1.0f, 0.0f, true);
  run(av, av, av, bv, static_cast<float>(cc), static_cast<float>(cb), true);
  run(bv, xv, xv, {x_next.data(), storage, m, n, n, 1}, 1.0f, static_cast<float>(ca), false);
  // Each product against f64 from the operands it actually read (the kernel's own stored A and B):
  // comparing the whole step against a double step would let one A or B element whose f32 sum
  // rounds to the neighbouring 16-bit value (a flip, legitimate) move a row of X' by an ulp of B
  // times |X|, far above any fixed fraction of a unit: seed 9230657486119653735 put an f16 B
  // diagonal flip at 1.3 units of the old bound. Per element, |got − exact| must stay within the
  // f32 sums' error, 2·K·2⁻²⁴·Σ|terms| (products, then α and β·C), plus half an ulp of the
  // storage type at |got| (at most 2⁻⁸ of it for bf16's 8 significant bits, 2⁻¹¹ for f16's 11), plus
  // f16's subnormal half-ulp (2⁻²⁵). A wrong tile, row, pair order or epilogue term is off by the
  // size of the values themselves.
  const double half_ulp = fp16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8), floor = fp16 ? std::ldexp(1.0, -25) : 0.0;
  auto stored = [&](const std::vector<uint16_t>& v, int64_t cols, int64_t i, int64_t j) { return value_of(v[static_cast<size_t>(i * cols + j)], storage); };
  auto check = [&](const char* name, const std::vector<uint16_t>& got, int64_t rows, int64_t cols, int64_t k,
                   const std::function<std::pair<double, double>(int64_t, int64_t)>& exact) {
    int64_t bad = 0;
    double worst = 0;
    std::string first;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const auto [value, magnitude] = exact(i, j);
        const double g = stored(got, cols, i, j);
        const double bound = 2.0 * static_cast<double>(k) * std::ldexp(1.0, -24) * magnitude + half_ulp * std::fabs(g) + floor;
        const double error = std::fabs(g - value);
        worst = std::max(worst, error / bound);
        if (!(error <= bound) && bad++ == 0) first = "(" + std::to_string(i) + ", " + std::to_string(j) + "): " + std::to_string(g) + " against " + std::to_string(value);
      }
    EXPECT_EQ(bad, 0) << name << ": " << bad << " elements beyond their bound, the first " << first << "; worst error / bound " << worst;
  };
  // α·Σ_k l(k)·r(k) + β·c in f64, and the magnitude its f32 sums' error is proportional to.
  auto exact_product = [](int64_t k, double alpha, double c_term, const std::function<double(int64_t)>& l, const std::function<double(int64_t)>& r) {
    double sum = 0, magnitude = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      const double term = l(kk) * r(kk);
      sum += term;
      magnitude += std::fabs(term);
    }
    return std::pair{alpha * sum + c_term, std::fabs(alpha) * magnitude + std::fabs(c_term)};
  };
  check("A = X·Xᵀ", a, m, m, n, [&](int64_t i, int64_t j) {
    return exact_product(n, 1.0, 0.0, [&](int64_t k) { return stored(x, n, i, k); }, [&](int64_t k) { return stored(x, n, j, k); });
  });
  check("B = c·A·A + b·A", b, m, m, m, [&](int64_t i, int64_t j) {
    return exact_product(m, static_cast<float>(cc), static_cast<double>(static_cast<float>(cb)) * stored(a, m, i, j), [&](int64_t k) { return stored(a, m, i, k); },
                         [&](int64_t k) { return stored(a, m, k, j); });
  });
  check("X' = B·X + a·X", x_next, m, n, m, [&](int64_t i, int64_t j) {
    return exact_product(m, 1.0, static_cast<double>(static_cast<float>(ca)) * stored(x, n, i, j), [&](int64_t k) { return stored(b, m, i, k); },
                         [&](int64_t k) { return stored(x, n, k, j); });
  });
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < m; ++j) ASSERT_EQ(a[static_cast<size_t>(i * m + j)], a[static_cast<size_t>(j * m + i)]) << "A is exactly symmetric";
}

TEST(AmxGemm, ANewtonSchulzStepWithBf16OperandsEverywhere) { newton_schulz_step_on_tiles(ScalarType::BF16); }

TEST(AmxFp16Gemm, ANewtonSchulzStepWithF16OperandsEverywhere) { newton_schulz_step_on_tiles(ScalarType::F16); }



// ---- whole programs on the amx path ------------------------------------------------------------

// Every bf16 shipped program, both strategies, the issue's shapes and a batch, on --isa amx: within
// bf16 tolerance of the interpreter's bf16 result (cpu_backend_test's argument for 3e-2), outputs
// poisoned, and identical for 1, 2 and 3 threads. Needs AMX (the emulated kernels cover the
// driver above).
TEST(AmxPrograms, MatchTheInterpreterAndAgreeForAnyThreads) {
  if (!host_supports(CpuIsa::AmxBf16)) GTEST_SKIP() << "AMX not usable here: " << unsupported_reason(CpuIsa::AmxBf16);
  struct Shape {
    int64_t batch, rows, cols;
  };
  const Shape shapes[] = {{1, 1, 1}, {1, 7, 300}, {1, 129, 517}, {1, 300, 64}, {1, 17, 1000}, {4, 33, 70}};
  for (const auto& shipped : kernels::shipped_programs()) {
    const dsl::Program program = kernels::load_program_by_name_or_path(std::string(shipped.name));
    if (program.policy.storage != ScalarType::BF16) continue;
    for (const char* strategy : {"standard", "gram"})
      for (const Shape& shape : shapes) {
        SCOPED_TRACE(std::string(shipped.name) + " " + strategy + " " + std::to_string(shape.batch) + "x" + std::to_string(shape.rows) + "x" +
                     std::to_string(shape.cols));
        const auto input = reference::gaussian_values(shape.batch * shape.rows * shape.cols, fresh_seed());
        runtime::OrthogonalizeOptions options;
        options.strategy = strategy;
        std::vector<float> as_f32(input.begin(), input.end());
        options.backend = "ref";
        const std::vector<double> reference = runtime::orthogonalize(program, std::vector<double>(as_f32.begin(), as_f32.end()), shape.batch,
                                                                     shape.rows, shape.cols, options).values;
        options.backend = "cpu";
        options.cpu_isa = "amx";
        std::vector<float> first;
        for (int threads : {1, 2, 3}) {
          options.threads = threads;
          auto compiled = runtime::compile_orthogonalizer(program, shape.batch, shape.rows, shape.cols, options);
          std::vector<float> out(input.size(), std::nanf(""));
          compiled->run(as_f32.data(), out.data());
          if (first.empty()) {
            first = out;
            // Gram's bf16 iteration runs on X·Xᵀ, whose condition number is the input's squared,
            // and restarts from it: a rounding flip of one stored element moves its result more
            // than the standard iteration's (fresh seeds on 4x33x70: up to 0.026 on the FMA path
            // and 0.040 on AMX against the interpreter, over 16 runs each), so 8e-2 there; both
            // must also be no farther from the exact iteration than the interpreter's own bf16
            // result is (cpu_backend_test's argument), which a missing rounding point fails.
            const std::vector<double> got(out.begin(), out.end());
            EXPECT_LT(testing::relative_error(got, reference), std::string(strategy) == "gram" ? 8e-2 : 3e-2);
            if (shape.rows * shape.cols > 1) {
              runtime::OrthogonalizeOptions exact_options = options;
              exact_options.backend = "ref";
              exact_options.precision = ScalarType::F64;
              const std::vector<double> exact = runtime::orthogonalize(program, std::vector<double>(as_f32.begin(), as_f32.end()), shape.batch,
                                                                       shape.rows, shape.cols, exact_options).values;
              EXPECT_LT(testing::relative_error(got, exact), 1.5 * testing::relative_error(reference, exact) + 1e-3);
            }
          } else {
            EXPECT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float))) << threads << " threads";
          }
        }
      }
  }
}

// ---- the engine as a tuning axis --------------------------------------------------------------

TEST(AmxTuning, TheEngineIsASearchAxisAndTheDefaultPicksAmxWherePresent) {
  using autotune::Candidate;
  const autotune::SearchSpace& space = autotune::search_space("cpu");
  for (const char* kernel : {"amx", "bf16dot", "fma"})
    EXPECT_NE(std::find(space.kernels.begin(), space.kernels.end(), kernel), space.kernels.end()) << kernel;
  int amx = 0, dot = 0, fma = 0;
  for (const Candidate& candidate : autotune::stage_one_candidates(space)) {
    amx += candidate.kernel == "amx";
    dot += candidate.kernel == "bf16dot";
    fma += candidate.kernel == "fma";
    if (candidate.engine != cpu::ProductEngine::Jit) {
      EXPECT_TRUE(candidate.kernel.empty());
    }
  }
  EXPECT_GT(amx, 0);
  EXPECT_EQ(amx, dot);
  EXPECT_EQ(amx, fma);
  Candidate candidate;
  candidate.kernel = "amx";
  EXPECT_EQ(Candidate::from_json(candidate.to_json()), candidate);
  EXPECT_EQ(candidate.cpu_isa(), CpuIsa::AmxBf16);
  candidate.kernel = "bf16dot";
  EXPECT_TRUE(candidate.blocking().bf16_dot);
  EXPECT_EQ(candidate.cpu_isa(), CpuIsa::Avx512Bf16);
  candidate.kernel = "fma";
  EXPECT_NE(candidate.cpu_isa(), CpuIsa::AmxBf16);
  EXPECT_FALSE(candidate.blocking().bf16_dot);
  // "" is the default path with its default engine (what `bench --model` and the untuned default
  // run): vdpbf16ps exactly where that engine is the default.
  candidate.kernel = "";
  EXPECT_EQ(candidate.blocking().bf16_dot, default_bf16_engine(best_host_isa()) == Bf16Engine::Bf16Dot);
  EXPECT_THROW(Candidate::from_json({{"engine", "jit"}, {"strategy", "standard"}, {"triangular", true}, {"blocking", {144, 384, 1024}}, {"kernel", "tpu"}}),
               std::invalid_argument);
  // Pruning: AMX where the default path is not amx, with the reason; for f32 storage every kernel
  // is the fma configuration.
  Candidate with_amx, with_fma;
  with_amx.kernel = "amx";
  with_fma.kernel = "fma";
  const auto amx_reason = autotune::prune_reason(with_amx, 1024, 4096, "", {}, ScalarType::BF16);
  EXPECT_EQ(amx_reason.has_value(), best_host_isa() != CpuIsa::AmxBf16);
  if (amx_reason) {
    EXPECT_NE(amx_reason->find("amx"), std::string::npos);
  }
  if (!amx_reason) {
    EXPECT_TRUE(autotune::prune_reason(with_amx, 1024, 4096, "", {with_fma}, ScalarType::F32).has_value()) << "f32 products stay on FMAs";
    EXPECT_FALSE(autotune::prune_reason(with_amx, 1024, 4096, "", {with_fma}, ScalarType::BF16).has_value());
  }
  // amx where it is the default path; elsewhere the vdpbf16ps kernel where it measured faster
  // than f32 FMAs on the avx512bf16 path (cpu/bf16_engine.h), else fma.
  const bool dot_faster = best_host_isa() == CpuIsa::Avx512Bf16 && bf16_dot_rates().ratio() >= kBf16DotPreferredRatio;
  EXPECT_EQ(autotune::default_kernel(ScalarType::BF16), best_host_isa() == CpuIsa::AmxBf16 ? "amx" : dot_faster ? "bf16dot" : "fma");
  EXPECT_EQ(autotune::default_kernel(ScalarType::F32), "fma");
}

}  // namespace
}  // namespace orthojit::cpu
