// Newton–Schulz (jordan, 5 steps) side by side in one run: orthojit's CPU backend against the two
// CPU vendor-library baselines the autotuner will also consider:
//   * OpenBLAS, f32: per step A = X·Xᵀ (ssyrk, then mirrored), B = c·A·A + b·A (sgemm with β),
//     X ← B·X + a·X (sgemm with β): the textbook products, X/(‖X‖_F + 1e-7) in f32 first.
//   * oneDNN, bf16 operands, f32 accumulation, bf16 results: the same three products as matmul
//     primitives with an output scale (α) and a sum post-op (β): what PyTorch's addmm does on CPU.
// Shapes: 1024x4096 (a 7B-class MLP matrix) and a batch of 32 per-head 128x512 matrices (the
// OpenBLAS baseline loops over them; oneDNN runs them as one batched matmul).
//   env -u OPENBLAS_L2_SIZE -u OPENBLAS_CORETYPE build/bin/orthojit_ns_bench
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true      (one line)
// OpenBLAS is called through orthojit's loader (cpu/openblas_library.h), not linked: it then runs
// the best kernel for this CPU (Debian's 0.3.21 would pick Prescott on recent Xeons), and the
// label says which. A linked library would choose before main, from OPENBLAS_CORETYPE alone.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "cpu/element_types.h"
#include "cpu/openblas_library.h"
#include "cpu/thread_pool.h"
#include "kernels/program_library.h"
#include "reference/random_matrix.h"
#include "runtime/orthogonalize.h"

namespace {

using namespace orthojit;
constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;
constexpr int kSteps = 5;

void count_flops(benchmark::State& state, double m, double n, double batch) {
  // Dense-equivalent FLOPs of 5-step standard NS: 20·m²n + 10·m³ per matrix.
  state.counters["GFLOP/s"] = benchmark::Counter((20 * m * m * n + 10 * m * m * m) * batch * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Orthojit(benchmark::State& state, const char* program_name, const char* strategy) {
  const int64_t m = state.range(0), n = state.range(1), batch = state.range(2);
  runtime::OrthogonalizeOptions options;
  options.backend = "cpu";
  options.strategy = strategy;
  auto compiled = runtime::compile_orthogonalizer(kernels::load_program_by_name_or_path(program_name), batch, m, n, options);
  const auto values = reference::gaussian_values(m * n * batch, 1);
  std::vector<float> input(values.begin(), values.end()), output(input.size());
  compiled->run(input.data(), output.data());
  for (auto _ : state) compiled->run(input.data(), output.data());
  state.SetLabel(compiled->describe_target());
  count_flops(state, static_cast<double>(m), static_cast<double>(n), static_cast<double>(batch));
}

// One matrix, f32, OpenBLAS.
void openblas_newton_schulz(const float* g, float* x, float* x_next, float* a, float* b, int m, int n) {
  // The norm is one pass over X against 5·(2m²n + m³) for the products: not worth a BLAS call.
  double squares = 0;
  for (int i = 0; i < m * n; ++i) squares += static_cast<double>(g[i]) * g[i];
  const float norm = static_cast<float>(std::sqrt(squares));
  for (int i = 0; i < m * n; ++i) x[i] = g[i] / (norm + 1e-7f);
  for (int step = 0; step < kSteps; ++step) {
    cpu::openblas_ssyrk(false, m, n, 1.0f, x, n, 0.0f, a, m);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < i; ++j) a[i * m + j] = a[j * m + i];
    std::memcpy(b, a, sizeof(float) * static_cast<size_t>(m) * static_cast<size_t>(m));
    cpu::openblas_sgemm(false, false, m, m, m, kC, a, m, a, m, kB, b, m);
    std::memcpy(x_next, x, sizeof(float) * static_cast<size_t>(m) * static_cast<size_t>(n));
    cpu::openblas_sgemm(false, false, m, n, m, 1.0f, b, m, x, n, kA, x_next, n);
    std::swap(x, x_next);
  }
}

void BM_OpenBlas(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1)), batch = static_cast<int>(state.range(2));
  const auto values = reference::gaussian_values(int64_t{m} * n * batch, 1);
  std::vector<float> g(values.begin(), values.end()), x(static_cast<size_t>(m) * n), x_next(x.size()), a(static_cast<size_t>(m) * m), b(a.size());
  for (auto _ : state)
    for (int item = 0; item < batch; ++item)
      openblas_newton_schulz(g.data() + static_cast<size_t>(item) * m * n, x.data(), x_next.data(), a.data(), b.data(), m, n);
  state.SetLabel(std::string("OpenBLAS ") + cpu::openblas_core_name());
  count_flops(state, m, n, batch);
}

// bf16 Newton–Schulz with oneDNN matmul primitives (batched when batch > 1). Where oneDNN has no
// bf16 matmul for the CPU (2.6 needs AVX512-BF16 or AVX-512 for it, and fails to create one on an
// AVX2 CPU), the baseline at its best is what orthojit's oneDNN engine does there too: f32 matmuls
// on the bf16 values, each result rounded to bf16 where the program stores it.
class OneDnnNewtonSchulz {
 public:
  OneDnnNewtonSchulz(int64_t batch, int64_t m, int64_t n) : batch_(batch), m_(m), n_(n), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    try {
      build(dnnl::memory::data_type::bf16);
    } catch (const dnnl::error&) {
      widened_ = true;
      build(dnnl::memory::data_type::f32);
    }
  }

  const char* label() const { return widened_ ? "oneDNN f32 matmul on bf16 values (no bf16 matmul for this CPU)" : "oneDNN bf16 matmul"; }

  void run(const float* g) {
    for (int64_t item = 0; item < batch_; ++item) {  // f32 norm, applied before the cast
      const float* source = g + item * m_ * n_;
      double sum = 0;
      for (int64_t i = 0; i < m_ * n_; ++i) sum += static_cast<double>(source[i]) * source[i];
      const float scale = 1.0f / (static_cast<float>(std::sqrt(sum)) + 1e-7f);
      for (int64_t i = 0; i < m_ * n_; ++i) {
        const cpu::Bf16 value = cpu::from_float<cpu::Bf16>(source[i] * scale);
        if (widened_) static_cast<float*>(x_.get_data_handle())[item * m_ * n_ + i] = cpu::to_float(value);
        else static_cast<cpu::Bf16*>(x_.get_data_handle())[item * m_ * n_ + i] = value;
      }
    }
    const size_t element = widened_ ? 4 : 2;
    for (int step = 0; step < kSteps; ++step) {
      xt_view_.set_data_handle(x_.get_data_handle());
      gram_.execute(stream_, {{DNNL_ARG_SRC, x_}, {DNNL_ARG_WEIGHTS, xt_view_}, {DNNL_ARG_DST, a_}});
      round_to_bf16(a_, batch_ * m_ * m_);
      std::memcpy(b_.get_data_handle(), a_.get_data_handle(), static_cast<size_t>(batch_ * m_ * m_) * element);
      square_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, a_}, {DNNL_ARG_DST, b_}});
      round_to_bf16(b_, batch_ * m_ * m_);
      std::memcpy(x_next_.get_data_handle(), x_.get_data_handle(), static_cast<size_t>(batch_ * m_ * n_) * element);
      update_.execute(stream_, {{DNNL_ARG_SRC, b_}, {DNNL_ARG_WEIGHTS, x_}, {DNNL_ARG_DST, x_next_}});
      round_to_bf16(x_next_, batch_ * m_ * n_);
      std::swap(x_, x_next_);
    }
    stream_.wait();
  }

 private:
  void build(dnnl::memory::data_type type) {
    auto md = [&](int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, int64_t matrix_stride) {
      return dnnl::memory::desc({batch_, rows, cols}, type, {matrix_stride, row_stride, col_stride});
    };
    const auto x_md = md(m_, n_, n_, 1, m_ * n_), xt_md = md(n_, m_, 1, n_, m_ * n_), a_md = md(m_, m_, m_, 1, m_ * m_);
    gram_ = make(x_md, xt_md, a_md, 1.0f, 0.0f);  // first: throws when the type has no matmul here
    square_ = make(a_md, a_md, a_md, kC, kB);
    update_ = make(a_md, x_md, x_md, 1.0f, kA);
    x_ = dnnl::memory(x_md, engine_);
    x_next_ = dnnl::memory(x_md, engine_);
    xt_view_ = dnnl::memory(xt_md, engine_, x_.get_data_handle());
    a_ = dnnl::memory(a_md, engine_);
    b_ = dnnl::memory(a_md, engine_);
  }

  // The widened form's stored results take bf16 values, as the bf16 program's do: a pass on all
  // the threads, so that the baseline is not held back by a serial loop.
  void round_to_bf16(const dnnl::memory& memory, int64_t count) {
    if (!widened_) return;
    stream_.wait();
    auto* values = static_cast<float*>(memory.get_data_handle());
    cpu::ThreadPool& pool = cpu::shared_thread_pool();
    const int64_t tasks = pool.size(), per_task = (count + tasks - 1) / tasks;
    pool.parallel_for(tasks, [&](int64_t task, int) {
      for (int64_t i = task * per_task; i < std::min(count, (task + 1) * per_task); ++i) values[i] = cpu::to_float(cpu::from_float<cpu::Bf16>(values[i]));
    });
  }

  dnnl::matmul make(const dnnl::memory::desc& src, const dnnl::memory::desc& weights, const dnnl::memory::desc& dst, float alpha, float beta) {
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops post;
      post.append_sum(beta);
      attr.set_post_ops(post);
    }
    return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), attr, engine_));
  }

  int64_t batch_, m_, n_;
  bool widened_ = false;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::memory x_, x_next_, xt_view_, a_, b_;
  dnnl::matmul gram_, square_, update_;
};

void BM_OneDnn(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), batch = state.range(2);
  const auto values = reference::gaussian_values(m * n * batch, 1);
  std::vector<float> g(values.begin(), values.end());
  OneDnnNewtonSchulz newton_schulz(batch, m, n);
  newton_schulz.run(g.data());
  for (auto _ : state) newton_schulz.run(g.data());
  state.SetLabel(newton_schulz.label());
  count_flops(state, static_cast<double>(m), static_cast<double>(n), static_cast<double>(batch));
}

void shapes(benchmark::internal::Benchmark* b) { b->Args({1024, 4096, 1})->Args({128, 512, 32})->Unit(benchmark::kMillisecond)->UseRealTime(); }

BENCHMARK_CAPTURE(BM_Orthojit, f32_standard, "jordan_ns5_f32", "standard")->Apply(shapes);
BENCHMARK_CAPTURE(BM_Orthojit, f32_gram, "jordan_ns5_f32", "gram")->Apply(shapes);
BENCHMARK(BM_OpenBlas)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Orthojit, bf16_standard, "jordan_ns5", "standard")->Apply(shapes);
BENCHMARK_CAPTURE(BM_Orthojit, bf16_gram, "jordan_ns5", "gram")->Apply(shapes);
BENCHMARK(BM_OneDnn)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
