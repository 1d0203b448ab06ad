// The optimizer's element-wise host rules (runtime/muon/update_rules.h) on a 4096x4096 parameter
// (16.8M elements: an embedding's size, far beyond the caches), against the same AdamW written
// as the plain f32 loop PyTorch's torch.optim.AdamW computes for an f32 parameter (its
// single-tensor form: m ← m + (1-β1)(g - m), v ← β2·v + (1-β2)·g², p ← p·(1 - lr·wd) -
// lr/bias1 · m / (√v / √bias2 + ε)), on the same thread pool and chunks. The baseline is the rate
// of a loop that reads and writes the same bytes; orthojit's rule computes in f64 and rounds once
// (docs/muon.md), so it cannot be faster, only as fast.
//
//   build/bin/orthojit_update_rules_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/thread_pool.h"
#include "reference/random_matrix.h"
#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/update_rules.h"

namespace {

using namespace orthojit;

constexpr int64_t kElements = int64_t{4096} * 4096;
constexpr int64_t kChunk = int64_t{1} << 15;  // update_rules.cpp's chunk

struct AdamBuffers {
  std::vector<float> gradient, exp_avg, exp_avg_sq, parameter;
  std::vector<uint16_t> parameter_bf16;
  AdamBuffers() {
    const std::vector<double> g = reference::gaussian_values(static_cast<size_t>(kElements), 3);
    gradient.assign(g.begin(), g.end());
    exp_avg.assign(static_cast<size_t>(kElements), 0.01f);
    exp_avg_sq.assign(static_cast<size_t>(kElements), 0.02f);
    parameter.assign(static_cast<size_t>(kElements), 0.5f);
    parameter_bf16.assign(static_cast<size_t>(kElements), 0x3f00);  // 0.5
  }
};

AdamBuffers& buffers() {
  static AdamBuffers instance;
  return instance;
}

runtime::AdamGroupSettings settings() {
  runtime::AdamGroupSettings adam;
  adam.lr = 3e-4;
  adam.weight_decay = 0.1;
  return adam;
}

// Arg: 0 f32 parameter, 1 bf16 parameter (moments f32 in both, as the optimizer keeps them).
void BM_AdamStep(benchmark::State& state) {
  AdamBuffers& b = buffers();
  const runtime::AdamGroupSettings adam = settings();
  const bool bf16 = state.range(0) == 1;
  int64_t step = 10;
  for (auto _ : state) {
    runtime::adam_step(adam, ++step, b.gradient.data(), b.exp_avg.data(), b.exp_avg_sq.data(), bf16 ? runtime::DType::BF16 : runtime::DType::F32,
                       bf16 ? static_cast<void*>(b.parameter_bf16.data()) : static_cast<void*>(b.parameter.data()), 0, kElements);
    benchmark::ClobberMemory();
  }
  state.SetLabel(bf16 ? "bf16 parameter" : "f32 parameter");
  state.SetBytesProcessed(state.iterations() * kElements * (bf16 ? 4 * 5 + 2 * 2 : 4 * 7));
}
BENCHMARK(BM_AdamStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The baseline: torch.optim.AdamW's f32 arithmetic as one loop per chunk, on the same pool.
void BM_AdamF32Loop(benchmark::State& state) {
  AdamBuffers& b = buffers();
  const runtime::AdamGroupSettings adam = settings();
  int64_t step = 10;
  for (auto _ : state) {
    ++step;
    const float beta1 = static_cast<float>(adam.beta1), beta2 = static_cast<float>(adam.beta2), eps = static_cast<float>(adam.eps);
    const float bias1 = static_cast<float>(1 - std::pow(adam.beta1, step)), bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(adam.beta2, step)));
    const float step_size = static_cast<float>(adam.lr) / bias1, decay = static_cast<float>(1 - adam.lr * adam.weight_decay);
    float* __restrict g = b.gradient.data();
    float* __restrict m = b.exp_avg.data();
    float* __restrict v = b.exp_avg_sq.data();
    float* __restrict p = b.parameter.data();
    cpu::shared_thread_pool().parallel_for((kElements + kChunk - 1) / kChunk, [&](int64_t task, int) {
      const int64_t lo = task * kChunk, hi = std::min(kElements, lo + kChunk);
      for (int64_t i = lo; i < hi; ++i) {
        m[i] += (1 - beta1) * (g[i] - m[i]);
        v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
        p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) / bias2_sqrt + eps);
      }
    });
    benchmark::ClobberMemory();
  }
  state.SetLabel("f32 parameter, torch's f32 arithmetic");
  state.SetBytesProcessed(state.iterations() * kElements * 4 * 7);
}
BENCHMARK(BM_AdamF32Loop)->Unit(benchmark::kMillisecond)->UseRealTime();

// HybridOptimizer::step on one AdamW parameter of that size (an embedding), f32 or bf16
// gradient: the rule above plus what the step adds around it (the non-finite check, the
// gradient's reading).
void BM_HybridStepAdamW(benchmark::State& state) {
  AdamBuffers& b = buffers();
  const bool bf16_gradient = state.range(0) == 1;
  std::vector<uint16_t> gradient_bf16(b.gradient.size());
  for (size_t i = 0; i < gradient_bf16.size(); ++i) gradient_bf16[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(b.gradient[i]) >> 16);
  runtime::Parameter p;
  p.name = "embed_tokens.weight";
  p.shape = {4096, 4096};
  p.data = b.parameter.data();
  p.grad = bf16_gradient ? static_cast<const void*>(gradient_bf16.data()) : static_cast<const void*>(b.gradient.data());
  p.grad_dtype = bf16_gradient ? runtime::DType::BF16 : runtime::DType::F32;
  p.use_muon = false;
  runtime::HybridOptimizer optimizer({p}, runtime::preset_settings("deepspeed"));
  for (auto _ : state) {
    const runtime::StepReport report = optimizer.step();
    if (report.adam_updated != 1) state.SkipWithError("the parameter was not updated");
  }
  state.SetLabel(bf16_gradient ? "bf16 gradient" : "f32 gradient");
}
BENCHMARK(BM_HybridStepAdamW)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// Muon's element-wise parts around Newton-Schulz: momentum (with Nesterov) and the apply.
void BM_MuonMomentum(benchmark::State& state) {
  AdamBuffers& b = buffers();
  runtime::MuonGroupSettings muon;
  muon.nesterov = true;
  for (auto _ : state) {
    runtime::muon_momentum(muon, b.gradient.data(), b.exp_avg.data(), b.exp_avg_sq.data(), kElements);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElements * 4 * 4);
}
BENCHMARK(BM_MuonMomentum)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
