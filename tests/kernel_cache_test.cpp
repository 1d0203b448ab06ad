// The in-memory kernel cache: the same specification compiles once; different ones get their own
// code; the generated code is what --emit llvm prints.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "cpu/kernel_cache.h"

namespace orthojit::cpu {
namespace {

TEST(KernelCache, CompilesEachSpecificationOnce) {
  const CpuIsa isa = best_host_isa();
  const MicrokernelSpec spec{isa, 96, false};
  const CompiledMicrokernel first = get_microkernel(spec);
  ASSERT_NE(first.function, nullptr);
  const CompiledMicrokernel second = get_microkernel(spec);
  EXPECT_EQ(second.function, first.function);
  EXPECT_EQ(second.jit_seconds, 0.0);  // a cache hit compiles nothing
  const CompiledMicrokernel other = get_microkernel({isa, 97, false});
  EXPECT_NE(other.function, first.function);

  EpilogueSpec epilogue;
  epilogue.isa = isa;
  epilogue.alpha = 2.0f;
  epilogue.has_c = true;
  epilogue.beta = -0.5f;
  epilogue.d_type = ScalarType::BF16;
  const CompiledEpilogue e1 = get_epilogue(epilogue);
  EXPECT_EQ(get_epilogue(epilogue).function, e1.function);
  epilogue.beta = -0.25f;  // a constant is part of the code, hence of the key
  EXPECT_NE(get_epilogue(epilogue).function, e1.function);
}

TEST(KernelCache, GeneratedEpilogueComputesTheFormulaAndRoundsToBf16) {
  EpilogueSpec spec;
  spec.isa = best_host_isa();
  spec.alpha = 2.0f;
  spec.beta = 0.5f;
  spec.gamma = 3.0f;
  spec.has_c = true;
  spec.d_type = ScalarType::BF16;
  const EpilogueFunction epilogue = get_epilogue(spec).function;
  const int64_t rows = 3, cols = 37;
  std::vector<float> acc(rows * cols), c(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    acc[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i) - 1.7f;
    c[static_cast<size_t>(i)] = 1.0f / static_cast<float>(i + 1);
  }
  std::vector<uint16_t> d(rows * cols, 0x7fc0);  // poisoned with NaN
  epilogue(acc.data(), cols, c.data(), cols, d.data(), cols, rows, cols, /*diagonal=*/1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const size_t k = static_cast<size_t>(i * cols + j);
      float expected = 2.0f * acc[k] + 0.5f * c[k];
      if (j == i + 1) expected += 3.0f;
      // Round-to-nearest-even to bf16, by the bit recipe.
      uint32_t bits;
      std::memcpy(&bits, &expected, 4);
      bits += 0x7fffu + ((bits >> 16) & 1u);
      EXPECT_EQ(d[k], static_cast<uint16_t>(bits >> 16)) << i << "," << j;
    }
}

// Threads that ask for the same kernel at once (a trainer orthogonalizing from several threads,
// the tuner's candidates) share one compile: one of them compiles, the rest wait for the cache's
// lock and get the same function, and each one's function computes the f32 formula. Also the case
// ThreadSanitizer checks the registry's locking on (make test-sanitize).
TEST(KernelCache, ThreadsAskingForOneKernelAtOnceShareOneCompile) {
  constexpr int kThreads = 4;
  EpilogueSpec spec;
  spec.isa = best_host_isa();
  spec.alpha = 1.25f;  // constants no other test uses: this process compiles it first here
  spec.beta = -0.75f;
  spec.has_c = true;
  std::vector<CompiledEpilogue> results(kThreads);
  std::atomic<int> waiting{kThreads};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      // Released together, so the requests overlap the first one's compile (milliseconds).
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();
      results[static_cast<size_t>(t)] = get_epilogue(spec);
    });
  for (auto& thread : threads) thread.join();
  int compiles = 0;
  for (const CompiledEpilogue& result : results) {
    ASSERT_NE(result.function, nullptr);
    EXPECT_EQ(result.function, results.front().function) << "two threads got different code for one kernel";
    if (result.jit_seconds > 0) ++compiles;
  }
  EXPECT_EQ(compiles, 1) << "the kernel was compiled more than once";
  // d = 1.25·acc - 0.75·c in f32: both products and the sum are single f32 roundings, which the
  // kernel (the same operations in the same order, FMA contraction aside) reproduces to within
  // one rounding of the largest term: |error| <= 2^-23 · (|1.25·acc| + |0.75·c|).
  const int64_t rows = 2, cols = 19;
  std::vector<float> acc(rows * cols), c(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    acc[static_cast<size_t>(i)] = 0.37f * static_cast<float>(i) - 3.1f;
    c[static_cast<size_t>(i)] = 2.0f / static_cast<float>(i + 3);
  }
  for (const CompiledEpilogue& result : results) {
    std::vector<float> d(rows * cols, std::numeric_limits<float>::quiet_NaN());
    result.function(acc.data(), cols, c.data(), cols, d.data(), cols, rows, cols, /*diagonal=*/0);
    for (size_t k = 0; k < d.size(); ++k) {
      const double expected = 1.25 * static_cast<double>(acc[k]) - 0.75 * static_cast<double>(c[k]);
      const double bound = 0x1p-23 * (std::fabs(1.25 * acc[k]) + std::fabs(0.75 * c[k]));
      EXPECT_NEAR(d[k], expected, bound) << "element " << k;
    }
  }
}

TEST(KernelCache, EmittedIrNamesItsTarget) {
  for (CpuIsa isa : supported_isas()) {
    const std::string ir = microkernel_ir({isa, 64, false});
    EXPECT_NE(ir.find("define void @orthojit_ukernel_" + std::string(to_string(isa))), std::string::npos);
    EXPECT_NE(ir.find("target-cpu"), std::string::npos);
  }
}

}  // namespace
}  // namespace orthojit::cpu
