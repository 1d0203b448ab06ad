// The CPU backend against the reference interpreter: every shipped program x {f32, bf16} x
// {standard, gram} x odd shapes and batches, outputs poisoned with NaN first; determinism; every
// ISA path this CPU runs.
//
// Tolerances. f32 policy: the backend accumulates in f32 where the interpreter sums exactly; a
// product of inner size K errs by at most K·2^-24 relative (typically √K·2^-24), and the iteration
// (a contraction towards the band near 1 after its first steps) amplifies that by at most ~10:
// 517·6e-8·10 ≈ 3e-4 → we require 5e-4. bf16/f16 policy: both sides round every stored value to
// 16 bits; an f32 accumulation difference flips a rounding now and then, each flip a relative 2^-8
// (bf16) on one element, which the later steps spread: the distance stays a few bf16 units
// (2^-8 ≈ 3.9e-3) → we require 3e-2, and that the backend is no farther from the exact f64
// iteration than 1.5x the interpreter's own 16-bit result is (so it really rounds like the policy).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "cpu/bf16_engine.h"
#include "cpu/cpu_isa.h"
#include "kernels/program_library.h"
#include "reference/random_matrix.h"
#include "runtime/orthogonalize.h"
#include "support/rounding.h"
#include "test_support.h"

namespace orthojit {
namespace {

using testing::relative_error;

// The engines of bf16 products this machine runs (cpu/bf16_engine.h).
std::vector<cpu::Bf16Engine> host_bf16_engines() {
  std::vector<cpu::Bf16Engine> engines;
  for (cpu::Bf16Engine engine : {cpu::Bf16Engine::Fma, cpu::Bf16Engine::Bf16Dot, cpu::Bf16Engine::Amx})
    if (cpu::host_supports(cpu::isa_for(engine))) engines.push_back(engine);
  return engines;
}

std::vector<double> run_cpu(const dsl::Program& program, const std::vector<double>& input, int64_t batch, int64_t rows, int64_t cols,
                            runtime::OrthogonalizeOptions options) {
  options.backend = "cpu";
  auto compiled = runtime::compile_orthogonalizer(program, batch, rows, cols, options);
  std::vector<float> in(input.begin(), input.end());
  std::vector<float> out(input.size(), std::numeric_limits<float>::quiet_NaN());  // poisoned
  compiled->run(in.data(), out.data());
  return {out.begin(), out.end()};
}

std::vector<double> run_reference(const dsl::Program& program, const std::vector<double>& input, int64_t batch, int64_t rows, int64_t cols,
                                  runtime::OrthogonalizeOptions options) {
  options.backend = "ref";
  options.cpu_kernel.clear();  // the interpreter has no CPU kernels to choose (refused there)
  std::vector<double> as_f32;
  for (double v : input) as_f32.push_back(static_cast<float>(v));  // both sides see the same f32 input
  return runtime::orthogonalize(program, as_f32, batch, rows, cols, options).values;
}

struct Shape {
  int64_t batch, rows, cols;
};

TEST(CpuBackend, MatchesTheReferenceInterpreter) {
  const Shape shapes[] = {{1, 1, 1}, {1, 7, 300}, {1, 129, 517}, {1, 300, 64}, {3, 20, 50}, {5, 33, 16}};
  for (const auto& shipped : kernels::shipped_programs()) {
    const dsl::Program program = kernels::load_program_by_name_or_path(std::string(shipped.name));
    for (ScalarType precision : {ScalarType::F32, ScalarType::BF16}) {
      for (const char* strategy : {"standard", "gram"}) {
        for (const Shape& shape : shapes) {
          SCOPED_TRACE(std::string(shipped.name) + " " + std::string(to_string(precision)) + " " + strategy + " " +
                       std::to_string(shape.batch) + "x" + std::to_string(shape.rows) + "x" + std::to_string(shape.cols));
          // bf16: every engine of the bf16 products this machine runs, each forced (results differ
          // in summation order only, so each must meet the same bound).
          for (const cpu::Bf16Engine engine : precision == ScalarType::BF16 ? host_bf16_engines() : std::vector<cpu::Bf16Engine>{cpu::Bf16Engine::Fma}) {
          SCOPED_TRACE(std::string(cpu::to_string(engine)));
          runtime::OrthogonalizeOptions options;
          options.strategy = strategy;
          options.precision = precision;
          if (precision == ScalarType::BF16) options.cpu_kernel = std::string(cpu::to_string(engine));
          const auto input = reference::gaussian_values(shape.batch * shape.rows * shape.cols, static_cast<uint64_t>(shape.rows * 7 + shape.cols));
          const auto cpu = run_cpu(program, input, shape.batch, shape.rows, shape.cols, options);
          for (double v : cpu) ASSERT_TRUE(std::isfinite(v)) << "unwritten or non-finite output";
          const auto reference = run_reference(program, input, shape.batch, shape.rows, shape.cols, options);
          if (precision == ScalarType::F32) {
            // A 1x1 input normalizes to σ = 1 up to an f32 rounding, where a schedule's composed
            // map may be steep (CANS: slope 4.9e4 at 1, the end of its interval), so the two
            // backends' one-ulp differences there grow by that slope.
            double slope = 1, x = 1;
            for (const auto& t : program.steps) {
              slope *= t.a + 3 * t.b * x * x + 5 * t.c * x * x * x * x;
              x = t.a * x + t.b * x * x * x + t.c * x * x * x * x * x;
            }
            EXPECT_LT(relative_error(cpu, reference), shape.rows * shape.cols == 1 ? std::max(5e-4, 4 * std::fabs(slope) * 0x1p-24) : 5e-4);
            continue;
          }
          EXPECT_LT(relative_error(cpu, reference), 3e-2);
          for (double v : cpu) ASSERT_EQ(v, round_to(ScalarType::BF16, v)) << "output is not a bf16 value";
          options.precision = ScalarType::F64;
          const auto exact = run_reference(program, input, shape.batch, shape.rows, shape.cols, options);
          if (shape.rows * shape.cols > 1) {
            EXPECT_LT(relative_error(cpu, exact), 1.5 * relative_error(reference, exact) + 1e-3);
          }
          }
        }
      }
    }
  }
}

TEST(CpuBackend, TheBf16KernelIsTheMeasuredFasterOneAndCanBeForced) {
  using cpu::Bf16Engine;
  // The rule (cpu/bf16_engine.h): AMX tiles on the amx path; the vdpbf16ps kernel on the
  // avx512bf16 path only where the instruction measured at least 1.25x the f32 FMA's FLOP rate;
  // widened f32 FMAs everywhere else.
  EXPECT_EQ(cpu::default_bf16_engine(cpu::CpuIsa::AmxBf16), Bf16Engine::Amx);
  for (cpu::CpuIsa isa : {cpu::CpuIsa::Generic, cpu::CpuIsa::Avx2Fma, cpu::CpuIsa::Avx512f}) EXPECT_EQ(cpu::default_bf16_engine(isa), Bf16Engine::Fma);
  const cpu::Bf16DotRates& rates = cpu::bf16_dot_rates();
  if (cpu::host_supports(cpu::CpuIsa::Avx512Bf16)) {
    ASSERT_GT(rates.bf16_dot_flops_per_cycle, 0);
    ASSERT_GT(rates.f32_fma_flops_per_cycle, 0);
    EXPECT_EQ(cpu::default_bf16_engine(cpu::CpuIsa::Avx512Bf16) == Bf16Engine::Bf16Dot, rates.ratio() >= cpu::kBf16DotPreferredRatio) << rates.ratio();
  } else {
    EXPECT_EQ(rates.ratio(), 0);
    EXPECT_EQ(cpu::default_bf16_engine(cpu::CpuIsa::Avx512Bf16), Bf16Engine::Fma);
  }
  const auto program = kernels::load_program_by_name_or_path("jordan_ns5");  // bf16 storage
  auto compile = [&](const std::string& isa, const std::string& kernel, std::optional<ScalarType> precision = std::nullopt) {
    runtime::OrthogonalizeOptions options;
    options.backend = "cpu";
    options.strategy = "standard";
    options.cpu_isa = isa;
    options.cpu_kernel = kernel;
    options.precision = precision;
    options.use_tuning_records = false;
    return runtime::compile_orthogonalizer(program, 1, 24, 40, options);
  };
  // The untuned default is the rule's, on the default path; f32 storage always reports FMAs.
  EXPECT_EQ(compile("", "")->cpu_engine(), cpu::to_string(cpu::default_bf16_engine(cpu::best_host_isa())));
  EXPECT_EQ(compile("", "", ScalarType::F32)->cpu_engine(), "fma");
  // Forcing: every engine this machine runs, with its path; the others refused with the reason.
  for (Bf16Engine engine : {Bf16Engine::Fma, Bf16Engine::Bf16Dot, Bf16Engine::Amx}) {
    const std::string name(cpu::to_string(engine));
    SCOPED_TRACE(name);
    const cpu::CpuIsa needed = cpu::isa_for(engine);
    if (cpu::host_supports(needed)) {
      const auto compiled = compile("", name);
      EXPECT_EQ(compiled->cpu_engine(), name);
      EXPECT_EQ(compiled->cpu_path(), cpu::to_string(needed));
      EXPECT_EQ(compiled->describe_target().find("bf16dot") != std::string::npos, engine == Bf16Engine::Bf16Dot) << compiled->describe_target();
    } else {
      try {
        compile("", name);
        ADD_FAILURE() << "--kernel " << name << " accepted on a CPU without its path";
      } catch (const runtime::UsageError& error) {
        EXPECT_NE(std::string(error.what()).find(cpu::unsupported_reason(needed)), std::string::npos) << error.what();
      }
    }
  }
  EXPECT_THROW(compile("", "tpu"), runtime::UsageError);
  {
    runtime::OrthogonalizeOptions options;  // a CPU kernel for the reference interpreter
    options.backend = "ref";
    options.cpu_kernel = "fma";
    EXPECT_THROW(runtime::compile_orthogonalizer(program, 1, 24, 40, options), runtime::UsageError);
  }
  // A kernel of another path than the one forced with --isa is refused; fma runs on any FMA path.
  if (cpu::host_supports(cpu::CpuIsa::Avx512Bf16)) {
    EXPECT_THROW(compile("avx512f", "bf16dot"), runtime::UsageError);
    EXPECT_EQ(compile("avx512f", "fma")->cpu_path(), "avx512f");
    // --isa avx512bf16 alone takes the path's default engine.
    EXPECT_EQ(compile("avx512bf16", "")->cpu_engine(), cpu::to_string(cpu::default_bf16_engine(cpu::CpuIsa::Avx512Bf16)));
  }
  if (cpu::host_supports(cpu::CpuIsa::AmxBf16)) {
    EXPECT_THROW(compile("amx", "fma"), runtime::UsageError);
  }
}

TEST(CpuBackend, SixteenBitFloatPolicyOfTheGramProgram) {
  const auto program = kernels::load_program_by_name_or_path("gram_polar_express5");  // f16 storage
  const int64_t m = 64, n = 256;
  const auto input = reference::gaussian_values(m * n, 17);
  runtime::OrthogonalizeOptions options;
  options.strategy = "gram";
  const auto cpu = run_cpu(program, input, 1, m, n, options);
  EXPECT_LT(relative_error(cpu, run_reference(program, input, 1, m, n, options)), 1e-2);  // f16: 2^-11 units
  for (double v : cpu) ASSERT_EQ(v, round_to(ScalarType::F16, v));
}

TEST(CpuBackend, IdenticalResultsAcrossRunsAndThreadCounts) {
  const auto program = kernels::load_program_by_name_or_path("polar_express5");
  const int64_t m = 96, n = 400;
  const auto input = reference::gaussian_values(m * n, 23);
  std::vector<std::vector<double>> results;
  for (int threads : {0, 0, 1, 3}) {
    runtime::OrthogonalizeOptions options;
    options.strategy = "gram";
    options.threads = threads;
    results.push_back(run_cpu(program, input, 1, m, n, options));
  }
  for (const auto& result : results) EXPECT_EQ(result, results.front());
}

TEST(CpuBackend, EachMatrixOfABatchGetsTheBitsItGetsAlone) {
  // A batch runs whole rounds of one matrix per worker and the matrices left over with their
  // products split across the workers (cpu_executable.h). Batches below, at and past the worker
  // count and with every remainder: each matrix must come out as it does alone on one thread,
  // wherever it ran (a wrong index in either part, or a leftover skipped, breaks it).
  const auto program = kernels::load_program_by_name_or_path("jordan_ns5");
  const int64_t m = 24, n = 70, elements = m * n;
  const auto input = reference::gaussian_values(7 * elements, 41);
  runtime::OrthogonalizeOptions options;
  options.strategy = "standard";
  std::vector<std::vector<double>> alone;
  for (int64_t z = 0; z < 7; ++z) {
    options.threads = 1;
    alone.push_back(run_cpu(program, std::vector<double>(input.begin() + z * elements, input.begin() + (z + 1) * elements), 1, m, n, options));
  }
  for (int threads : {2, 3})
    for (int64_t batch : {1, 2, 3, 4, 5, 7}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", batch " + std::to_string(batch));
      options.threads = threads;
      const auto result = run_cpu(program, std::vector<double>(input.begin(), input.begin() + batch * elements), batch, m, n, options);
      for (int64_t z = 0; z < batch; ++z)
        EXPECT_EQ(std::vector<double>(result.begin() + z * elements, result.begin() + (z + 1) * elements), alone[static_cast<size_t>(z)]) << "matrix " << z;
    }
}

TEST(CpuBackend, ConcurrentCallersShareOneExecutableSafely) {
  // A trainer may orthogonalize from several threads; they share the cached executable and the
  // process-wide pool. Each must get exactly the single-threaded caller's result.
  const auto program = kernels::load_program_by_name_or_path("jordan_ns5");
  const int64_t m = 64, n = 200;
  runtime::OrthogonalizeOptions options;
  options.backend = "cpu";
  options.strategy = "standard";
  auto compiled = runtime::compile_orthogonalizer(program, 1, m, n, options);
  std::vector<std::vector<float>> inputs, outputs, expected;
  for (int caller = 0; caller < 4; ++caller) {
    const auto values = reference::gaussian_values(m * n, static_cast<uint64_t>(100 + caller));
    inputs.emplace_back(values.begin(), values.end());
    expected.emplace_back(values.size());
    compiled->run(inputs.back().data(), expected.back().data());
    outputs.emplace_back(values.size(), std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<std::thread> callers;
  for (int caller = 0; caller < 4; ++caller)
    callers.emplace_back([&, caller] {
      for (int repeat = 0; repeat < 5; ++repeat) compiled->run(inputs[static_cast<size_t>(caller)].data(), outputs[static_cast<size_t>(caller)].data());
    });
  for (auto& thread : callers) thread.join();
  EXPECT_EQ(outputs, expected);
}

TEST(CpuBackend, EveryIsaPathAgrees) {
  const auto program = kernels::load_program_by_name_or_path("jordan_ns5_f32");
  const int64_t m = 40, n = 130;
  const auto input = reference::gaussian_values(m * n, 31);
  std::vector<double> fused;
  for (cpu::CpuIsa isa : cpu::supported_isas()) {
    SCOPED_TRACE(std::string(to_string(isa)));
    runtime::OrthogonalizeOptions options;
    options.strategy = "standard";
    options.cpu_isa = std::string(to_string(isa));
    const auto result = run_cpu(program, input, 1, m, n, options);
    if (isa == cpu::CpuIsa::Generic) {
      // fmuladd may or may not fuse on the generic path: f32 tolerance, not bit equality.
      EXPECT_LT(relative_error(result, run_reference(program, input, 1, m, n, options)), 5e-4);
      continue;
    }
    // Same blocking (kc), same fused multiply-adds in the same k order: bit for bit.
    if (fused.empty()) {
      fused = result;
    } else {
      EXPECT_EQ(result, fused);
    }
  }
}

TEST(CpuBackend, RefusesTheFloat64Policy) {
  runtime::OrthogonalizeOptions options;
  options.backend = "cpu";
  options.precision = ScalarType::F64;
  EXPECT_THROW(runtime::compile_orthogonalizer(kernels::load_program_by_name_or_path("jordan_ns5"), 1, 4, 8, options), runtime::UsageError);
  options.precision.reset();
  options.cpu_isa = "avx1024";
  EXPECT_THROW(runtime::compile_orthogonalizer(kernels::load_program_by_name_or_path("jordan_ns5"), 1, 4, 8, options), runtime::UsageError);
}

}  // namespace
}  // namespace orthojit
