// Google Benchmark: the cost of compiling (parse + lowering + passes) and of the float64
// reference interpreter, standard vs gram, and of SHA-256 (the caches' keys and checksums: a warm
// load from the CUDA program cache checksums its cubin), portable beside the x86 SHA extensions.
// The interpreter is the correctness oracle, not a fast path; these numbers say how large a test
// or demo can be.
//   build/bin/orthojit_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"
#include "reference/random_matrix.h"
#include "support/sha256.h"

namespace {

using namespace orthojit;

void BM_Compile(benchmark::State& state, const char* program_name, ir::StrategyKind strategy) {
  const dsl::Program program = kernels::load_program_by_name_or_path(program_name);
  passes::CompileOptions options;
  options.rows = 1024;
  options.cols = 4096;
  options.strategy = strategy;
  for (auto _ : state) benchmark::DoNotOptimize(passes::compile_program(program, options));
}

void BM_ParseAndCheck(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(kernels::load_program_by_name_or_path("polar_express5"));
}

// Dense-equivalent FLOPs of 5-step standard NS: 20·m²n + 10·m³ (docs/architecture.md §5).
void BM_Interpret(benchmark::State& state, ir::StrategyKind strategy) {
  const int64_t m = state.range(0), n = 4 * m;
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  passes::CompileOptions options;
  options.rows = m;
  options.cols = n;
  options.strategy = strategy;
  const ir::Function function = passes::compile_program(program, options);
  const auto input = reference::gaussian_values(m * n, 1);
  for (auto _ : state) benchmark::DoNotOptimize(reference::interpret(function, input));
  const double flops = 20.0 * static_cast<double>(m * m * n) + 10.0 * static_cast<double>(m * m * m);
  state.counters["dense_equiv_GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// A cubin-sized message (the program cache's warm loads checksum 0.4-0.8 MB).
void BM_Sha256(benchmark::State& state, Sha256Implementation implementation) {
  if (implementation == Sha256Implementation::X86ShaExtensions && !sha256_x86_available()) {
    state.SkipWithError("this CPU does not report the x86 SHA extensions");
    return;
  }
  const std::string message(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(sha256_hex(message, implementation));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

BENCHMARK(BM_ParseAndCheck);
BENCHMARK_CAPTURE(BM_Sha256, portable, Sha256Implementation::Portable)->Arg(512 << 10)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Sha256, x86_sha_extensions, Sha256Implementation::X86ShaExtensions)->Arg(512 << 10)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Compile, jordan_standard, "jordan_ns5", ir::StrategyKind::Standard);
BENCHMARK_CAPTURE(BM_Compile, jordan_gram, "jordan_ns5", ir::StrategyKind::Gram);
BENCHMARK_CAPTURE(BM_Compile, deepseek_standard, "deepseek_v4", ir::StrategyKind::Standard);
BENCHMARK_CAPTURE(BM_Interpret, standard, ir::StrategyKind::Standard)->Arg(32)->Arg(64)->Arg(128)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Interpret, gram, ir::StrategyKind::Gram)->Arg(32)->Arg(64)->Arg(128)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
