// HybridOptimizer::step on the Muon matrices of a stack of transformer blocks (per layer: QKV
// (3h x h), O (h x h), MLP up (4h x h) and down (h x 4h)), bf16 parameters and gradients, the
// keller preset (bf16 Newton-Schulz on the cpu backend), on every core:
//   together: one optimizer; equal shapes of all layers step as one batched compiled Muon step
//             (runtime/muon/muon_step_launcher.h), whole rounds of one matrix per worker;
//   alone:    one optimizer per parameter, as the step ran before the grouping: a compiled call
//             per parameter, each product split across the workers.
// Both compute the same bits (tests/hybrid_optimizer_test.cpp); the ratio of medians is what the
// grouping buys.
//
//   build/bin/orthojit_muon_step_grouping_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/optimizer_settings.h"

namespace {

using namespace orthojit;

struct Stack {
  std::vector<std::vector<uint16_t>> data, grad;
  std::vector<runtime::Parameter> parameters;
};

uint16_t bf16_of(float value) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(value) >> 16); }

Stack make_stack(int64_t hidden, int layers) {
  Stack stack;
  std::mt19937 random(7);
  std::normal_distribution<float> gaussian;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> block = {
      {"attn.qkv.weight", {3 * hidden, hidden}}, {"attn.o.weight", {hidden, hidden}}, {"mlp.up.weight", {4 * hidden, hidden}}, {"mlp.down.weight", {hidden, 4 * hidden}}};
  for (int layer = 0; layer < layers; ++layer)
    for (const auto& [name, shape] : block) {
      const size_t elements = static_cast<size_t>(shape[0] * shape[1]);
      stack.data.emplace_back(elements);
      stack.grad.emplace_back(elements);
      for (size_t i = 0; i < elements; ++i) {
        stack.data.back()[i] = bf16_of(0.02f * gaussian(random));
        stack.grad.back()[i] = bf16_of(gaussian(random));
      }
      runtime::Parameter p;
      p.name = "layers." + std::to_string(layer) + "." + name;
      p.shape = shape;
      p.dtype = runtime::DType::BF16;
      p.grad_dtype = runtime::DType::BF16;
      p.use_muon = true;
      stack.parameters.push_back(std::move(p));
    }
  for (size_t i = 0; i < stack.parameters.size(); ++i) {
    stack.parameters[i].data = stack.data[i].data();
    stack.parameters[i].grad = stack.grad[i].data();
  }
  return stack;
}

// range(0): hidden size, range(1): layers, range(2): 1 together, 0 alone.
void BM_MuonStep(benchmark::State& state) {
  Stack stack = make_stack(state.range(0), static_cast<int>(state.range(1)));
  const bool together = state.range(2) == 1;
  const runtime::OptimizerSettings settings = runtime::preset_settings("keller");
  std::vector<std::unique_ptr<runtime::HybridOptimizer>> optimizers;
  if (together) optimizers.push_back(std::make_unique<runtime::HybridOptimizer>(stack.parameters, settings));
  else
    for (const runtime::Parameter& p : stack.parameters) optimizers.push_back(std::make_unique<runtime::HybridOptimizer>(std::vector<runtime::Parameter>{p}, settings));
  auto step = [&] {
    int updated = 0;
    for (auto& optimizer : optimizers) updated += optimizer->step().muon_updated;
    return updated;
  };
  if (step() != static_cast<int>(stack.parameters.size())) state.SkipWithError("a parameter was not updated");  // compiles every shape
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.SetLabel(std::string(together ? "together" : "alone") + ", " + std::to_string(stack.parameters.size()) + " matrices");
}
BENCHMARK(BM_MuonStep)
    ->ArgNames({"hidden", "layers", "together"})
    ->Args({64, 8, 0})->Args({64, 8, 1})
    ->Args({128, 8, 0})->Args({128, 8, 1})
    ->Args({256, 8, 0})->Args({256, 8, 1})
    ->Args({512, 2, 0})->Args({512, 2, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
