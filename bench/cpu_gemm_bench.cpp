// The CPU GEMM alone, side by side with OpenBLAS sgemm in the same run: a 2048³ f32 product
// (and bf16 operands with f32 accumulation for orthojit: on f32 FMAs, on vdpbf16ps, and on AMX
// tiles where usable). Dense FLOPs = 2·M·N·K.
//   build/bin/orthojit_gemm_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// ORTHOJIT_CPU_BLOCKING=MC,KC,NC times another blocking of the FMA GEMM (the label shows it).
// OpenBLAS runs through orthojit's loader (cpu/openblas_library.h), which chooses its best kernel
// for this CPU; `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE` keeps a stray setting out.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "cpu/aligned_buffer.h"
#include "cpu/amx_packing.h"
#include "cpu/element_types.h"
#include "cpu/gemm_driver.h"
#include "cpu/kernel_cache.h"
#include "cpu/openblas_library.h"
#include "cpu/thread_pool.h"
#include "reference/random_matrix.h"
#include "support/cpu_peak.h"
#include "support/host_cpu.h"


namespace {

using namespace orthojit;

void set_flops(benchmark::State& state, double m, double n, double k) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_OrthojitGemm(benchmark::State& state, ScalarType type, bool one_thread, bool bf16_dot = false,
                     std::optional<cpu::CpuIsa> forced = std::nullopt) {
  const int64_t size = state.range(0);
  const auto values = reference::gaussian_values(size * size, 1);
  std::vector<float> a32(values.begin(), values.end()), b32(a32), d32(static_cast<size_t>(size * size));
  std::vector<cpu::Bf16> a16, b16;
  for (float v : a32) a16.push_back(cpu::from_float<cpu::Bf16>(v));
  b16 = a16;
  const bool f32 = type == ScalarType::F32;
  cpu::GemmProblem problem;
  problem.a = {f32 ? static_cast<void*>(a32.data()) : static_cast<void*>(a16.data()), type, size, size, size, 1};
  problem.b = {f32 ? static_cast<void*>(b32.data()) : static_cast<void*>(b16.data()), type, size, size, size, 1};
  problem.d = {d32.data(), ScalarType::F32, size, size, size, 1};
  if (forced && !cpu::host_supports(*forced)) return state.SkipWithError(cpu::unsupported_reason(*forced).c_str());
  // The default path (amx where usable: bf16 operands then run on AMX tiles) unless forced.
  const cpu::CpuIsa isa = forced ? *forced : cpu::best_host_isa();
  cpu::EpilogueSpec epilogue;
  epilogue.isa = isa;
  problem.epilogue = cpu::get_epilogue(epilogue).function;
  cpu::GemmBlocking blocking;
  // The same override as the runtime's (runtime/orthogonalize.cpp), to time other blockings.
  if (const char* text = std::getenv("ORTHOJIT_CPU_BLOCKING"); text && *text) {
    if (std::sscanf(text, "%ld,%ld,%ld", &blocking.mc, &blocking.kc, &blocking.nc) != 3 || blocking.mc < 1 || blocking.kc < 2 || blocking.nc < 1)
      return state.SkipWithError("ORTHOJIT_CPU_BLOCKING must be MC,KC,NC (positive, KC at least 2)");
  }
  blocking.bf16_dot = bf16_dot;
  state.SetLabel("mc=" + std::to_string(blocking.mc) + " kc=" + std::to_string(blocking.kc) + " nc=" + std::to_string(blocking.nc));
  // Kernels looked up by name once, as the compiled executable does (get_microkernel re-emits and
  // hashes the IR on every call: milliseconds that are not the GEMM's).
  std::map<std::string, cpu::MicrokernelFunction> kernels;
  cpu::GemmDriver driver(isa, blocking, [&kernels](const cpu::MicrokernelSpec& spec) {
    auto [it, inserted] = kernels.try_emplace(spec.name(), nullptr);
    if (inserted) it->second = cpu::get_microkernel(spec).function;
    return it->second;
  });
  cpu::ThreadPool* pool = one_thread ? nullptr : &cpu::shared_thread_pool();
  driver.run(problem, pool);  // JIT outside the timing
  for (auto _ : state) driver.run(problem, pool);
  set_flops(state, static_cast<double>(size), static_cast<double>(size), static_cast<double>(size));
  if (cpu::uses_bf16_dot(isa, blocking.bf16_dot, problem.a, problem.b)) {
    // The fraction of the measured vdpbf16ps ceiling of the threads that ran (cpu_peak.h).
    const double ghz = measure_clock_ghz();
    const double ceiling = ghz * measure_bf16_dot_flops_per_cycle(ghz) * (pool ? pool->size() : 1) * 1e9;
    state.counters["of_bf16_dot_ceiling"] = benchmark::Counter(2.0 * static_cast<double>(size) * static_cast<double>(size) * static_cast<double>(size) / ceiling,
                                                               benchmark::Counter::kIsIterationInvariantRate);
  }
  if (cpu::uses_amx(isa, blocking.amx_fp16, problem.a, problem.b)) {
    // The fraction of the measured TDPBF16PS ceiling of the threads that ran (cpu_peak.h).
    const double ghz = measure_clock_ghz();
    const double ceiling = ghz * measure_amx_bf16_flops_per_cycle(ghz) * (pool ? pool->size() : 1) * 1e9;
    state.counters["of_amx_ceiling"] = benchmark::Counter(2.0 * static_cast<double>(size) * static_cast<double>(size) * static_cast<double>(size) / ceiling,
                                                          benchmark::Counter::kIsIterationInvariantRate);
  }
}

void BM_OpenBlasSgemm(benchmark::State& state, bool one_thread) {
  const int size = static_cast<int>(state.range(0));
  orthojit::cpu::openblas_set_threads(one_thread ? 1 : orthojit::cpu::shared_thread_pool().size());
  const auto values = reference::gaussian_values(int64_t{size} * size, 1);
  std::vector<float> a(values.begin(), values.end()), b(a), c(a.size());
  state.SetLabel(orthojit::cpu::openblas_core_name());
  for (auto _ : state) orthojit::cpu::openblas_sgemm(false, false, size, size, size, 1.0f, a.data(), size, b.data(), size, 0.0f, c.data(), size);
  set_flops(state, size, size, size);
}

BENCHMARK_CAPTURE(BM_OrthojitGemm, f32, ScalarType::F32, false)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_OrthojitGemm, bf16_operands, ScalarType::BF16, false)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_OrthojitGemm, bf16_dot_products, ScalarType::BF16, false, true)->Arg(128)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_OrthojitGemm, bf16_dot_products_1thread, ScalarType::BF16, true, true)->Arg(128)->Arg(256)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
// AMX-BF16 tiles (the amx path; skipped where AMX is not usable): the 2048³ targets are
// >= 60% of the measured ceiling on one thread, >= 55% on two.
BENCHMARK_CAPTURE(BM_OrthojitGemm, amx, ScalarType::BF16, false, false, cpu::CpuIsa::AmxBf16)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_OrthojitGemm, amx_1thread, ScalarType::BF16, true, false, cpu::CpuIsa::AmxBf16)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_OpenBlasSgemm, all_threads, false)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_OrthojitGemm, f32_1thread, ScalarType::F32, true)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_OpenBlasSgemm, 1thread, true)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

namespace {
// The microkernel alone, one thread, panels resident in L1/L2: the ceiling of the GEMM.
// With bf16_dot the same FLOPs per call (kc·MR·NR·2) run as vdpbf16ps on bf16 pairs.
void BM_MicrokernelAlone(benchmark::State& state, bool bf16_dot) {
  const orthojit::cpu::CpuIsa isa = orthojit::cpu::best_host_isa();
  if (bf16_dot && isa != orthojit::cpu::CpuIsa::Avx512Bf16) return state.SkipWithError("no AVX512-BF16 on this CPU");
  const auto traits = orthojit::cpu::traits_of(isa);
  const int64_t kc = state.range(0);
  auto kernel = orthojit::cpu::get_microkernel({isa, kc, bf16_dot}).function;
  std::vector<float> a(static_cast<size_t>(kc * traits.mr), 0.5f);
  alignas(64) static float b[512 * 64];  // packed B is 64-byte aligned in the driver too
  std::fill(b, b + kc * traits.nr, 0.25f);
  alignas(64) float c[16 * 64] = {};
  for (auto _ : state) {
    for (int repeat = 0; repeat < 100; ++repeat) kernel(a.data(), b, c, traits.nr, 1, 0, 0);
    benchmark::DoNotOptimize(c);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(100.0 * 2.0 * static_cast<double>(kc * traits.mr * traits.nr) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_MicrokernelAlone, f32_fma, false)->Arg(256)->Arg(384)->Arg(512);
BENCHMARK_CAPTURE(BM_MicrokernelAlone, bf16_dot, true)->Arg(256);

// The AMX kernel alone, one thread: A panels (32 x kc) against 8 B panels (kc x 32) resident in
// L1/L2, `panels` microtiles per call (the driver's row of microtiles); compare with the measured
// TDPBF16PS ceiling in BM_MeasuredClock. Args: kc, B panels per call, A panels taken in turn (1:
// the same A panel every call, in L1; 5: as the driver's row block of 160 rows, each call's A
// panel coming from L2 after the previous call's prefetch, each with its own C rows).
void BM_AmxMicrokernelAlone(benchmark::State& state) {
  using namespace orthojit::cpu;
  if (!host_supports(CpuIsa::AmxBf16)) return state.SkipWithError(unsupported_reason(CpuIsa::AmxBf16).c_str());
  const int64_t kc = state.range(0), panels = state.range(1), a_count = state.range(2);
  MicrokernelSpec spec;
  spec.isa = CpuIsa::AmxBf16;
  spec.kc = kc;
  spec.amx = true;
  auto kernel = get_microkernel(spec).function;
  // 64-byte aligned panels, as the driver's (a tile row that straddles two cache lines costs two
  // loads: std::vector's 16-byte alignment halved the rate measured here).
  AlignedBuffer a_buffer, b_buffer, c_buffer;
  auto* a = static_cast<uint16_t*>(a_buffer.get(static_cast<size_t>(a_count * 32 * kc) * 2));
  auto* b = static_cast<uint16_t*>(b_buffer.get(static_cast<size_t>(panels * 32 * kc) * 2));
  std::fill(a, a + a_count * 32 * kc, uint16_t{0x3f00});
  std::fill(b, b + panels * 32 * kc, uint16_t{0x3e80});
  // The accumulator's row stride padded as the driver pads it (accumulator_stride): a power of two
  // would put the 32 rows of a C tile in a few L1 sets.
  const int64_t ldc = accumulator_stride(panels * 32);
  float* c = c_buffer.floats(a_count * 32 * ldc);
  std::fill(c, c + a_count * 32 * ldc, 0.0f);
  for (auto _ : state) {
    for (int repeat = 0; repeat < 100; ++repeat) {
      const int64_t which = repeat % a_count, next = (repeat + 1) % a_count;
      kernel(reinterpret_cast<const float*>(a + which * 32 * kc), reinterpret_cast<const float*>(b), c + which * 32 * ldc, ldc, 1,
             reinterpret_cast<int64_t>(a + next * 32 * kc), panels);
    }
    benchmark::DoNotOptimize(c);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(100.0 * 2.0 * static_cast<double>(kc * 32 * 32 * panels) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AmxMicrokernelAlone)
    ->Args({256, 8, 1})
    ->Args({512, 8, 1})
    ->Args({1024, 8, 1})
    ->Args({256, 1, 1})
    ->Args({512, 32, 1})
    ->Args({512, 8, 5})
    ->Args({512, 32, 5})
    ->Args({256, 8, 5});

// Packing for the AMX kernel alone, bf16 1024 x 4096 (8 MiB: in L3 here, as X is in NS5), against
// memcpy of the same bytes in the same run: what the packed layout costs beyond moving the data.
// Arg 0: A panels of X (row-major, K along rows); 1: B of X·Xᵀ (Xᵀ: a 16x16 transpose of 32-bit
// pairs per tile); 2: B of B·X (row-major B: rows interleaved in pairs); 3: memcpy.
void BM_AmxPacking(benchmark::State& state) {
  using namespace orthojit::cpu;
  const int64_t rows = 1024, cols = 4096, kc = 512;
  AlignedBuffer source_buffer, target_buffer;
  auto* source = static_cast<uint16_t*>(source_buffer.get(static_cast<size_t>(rows * cols) * 2));
  auto* target = static_cast<uint16_t*>(target_buffer.get(static_cast<size_t>(rows * cols) * 2));
  for (int64_t i = 0; i < rows * cols; ++i) source[i] = static_cast<uint16_t>(0x3f00 + i % 97);
  const MatrixView x{source, ScalarType::BF16, rows, cols, cols, 1};
  const int mode = static_cast<int>(state.range(0));
  for (auto _ : state) {
    for (int64_t k0 = 0; k0 < cols && mode != 3; k0 += kc) {
      uint16_t* block = target + rows * k0;
      if (mode == 0) pack_amx_a(x, k0, kc, kc, 0, rows / 32, block);
      if (mode == 1) pack_amx_b(x.transposed(), k0, kc, kc, 0, rows, 0, rows / 32, block);
      if (mode == 2 && k0 < rows) pack_amx_b(x, k0, kc, kc, 0, cols, 0, cols / 32, target + cols * k0);
    }
    if (mode == 3) std::memcpy(target, source, static_cast<size_t>(rows * cols) * 2);
    benchmark::DoNotOptimize(target);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 2);
  state.SetLabel(mode == 0 ? "A of X" : mode == 1 ? "B = X^T" : mode == 2 ? "B = X" : "memcpy");
}
BENCHMARK(BM_AmxPacking)->DenseRange(0, 3);

// One parallel phase of the shared pool with nothing to do but `tasks` empty tasks, back to back:
// the fixed cost a product pays per phase (a small product has two or three). Arg(1): spin 0
// (workers sleep between jobs), else the default spin (thread_pool.h).
void BM_ThreadPoolPhase(benchmark::State& state) {
  cpu::ThreadPool pool(host_cpu().logical_cores, state.range(0) == 1 ? 0 : -1);
  const int64_t tasks = 2 * pool.size();
  std::vector<int64_t> sink(static_cast<size_t>(tasks));
  for (auto _ : state) pool.parallel_for(tasks, [&](int64_t task, int) { sink[static_cast<size_t>(task)] += task; });
  benchmark::DoNotOptimize(sink.data());
  state.SetLabel(std::to_string(pool.size()) + " threads, spin " + std::to_string(pool.spin_microseconds()) + " us");
}
BENCHMARK(BM_ThreadPoolPhase)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_MeasuredClock(benchmark::State& state) {
  double ghz = 0;
  for (auto _ : state) ghz = orthojit::measure_clock_ghz();
  state.counters["GHz"] = ghz;
  // Two FMA pipes of the widest vectors the host has: 512-bit (16 lanes) with AVX-512, else 256-bit.
  const int lanes = orthojit::host_cpu().avx512f ? 16 : 8;
  state.counters["core_nominal_f32_GFLOP/s"] = ghz * 2 * 2 * lanes;
  // The f32 FMA ceiling as measured (Zen 4 retires zmm FMAs at half the nominal rate).
  if (const double measured = orthojit::measure_f32_fma_flops_per_cycle(ghz, lanes); measured > 0)
    state.counters["core_f32_fma_measured_GFLOP/s"] = ghz * measured;
  // The bf16 dot-product ceiling: vdpbf16ps alone, in registers (cpu_peak.h); compare
  // BM_MicrokernelAlone/bf16_dot with it.
  if (orthojit::cpu::host_supports(orthojit::cpu::CpuIsa::Avx512Bf16))
    state.counters["core_bf16_dot_measured_GFLOP/s"] = ghz * orthojit::measure_bf16_dot_flops_per_cycle(ghz);
  // The AMX-BF16 ceiling: TDPBF16PS alone on tiles in registers.
  if (orthojit::cpu::host_supports(orthojit::cpu::CpuIsa::AmxBf16))
    state.counters["core_amx_bf16_measured_GFLOP/s"] = ghz * orthojit::measure_amx_bf16_flops_per_cycle(ghz);
}
BENCHMARK(BM_MeasuredClock)->Iterations(1);
}  // namespace
