// The GPU benchmark of scripts/gpu-check: orthojit's CUDA variants side by side with the
// baselines, in one run, on the shapes of issue 5 (square, wide, MLP-sized, batched experts and
// heads). Per case every applicable variant is timed (generated with each tile configuration,
// the fused small-matrix kernel) and the fastest is orthojit's number; the baselines are the
// cuBLAS Newton–Schulz from the formula (same program coefficients), the cuBLAS NS looped over
// the batch (for batched cases), and a plain PyTorch bf16 NS5 when scripts/torch_ns_baseline.py
// left its results (--torch FILE). The cuBLAS bf16 GEMM rate at 8192³ is measured first and
// rates are reported as fractions of it.
//
// Timing: CUDA events around one call, an L2 flush (a memset of twice the L2) before each, 3
// warm-ups, median of --repeats. TFLOP/s counts the standard algorithm's FLOPs (2m²n + 2m³ + 2m²n
// per step, m <= n), so strategies that skip work (gram, triangular products) show as a higher
// effective rate and the rates of all variants of a case compare directly.
//
// Usage: orthojit_gpu_bench [--out-dir DIR] [--torch FILE] [--repeats N] [--list-cases] [--quick]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/cublas_newton_schulz.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_driver.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/random_matrix.h"

namespace {

using namespace orthojit;

struct BenchCase {
  std::string program;
  int64_t rows, cols, batch;
  ir::StrategyKind strategy;
  std::string key() const {
    return program + " " + std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(batch) + " " + ir::to_string(strategy);
  }
  std::string torch_key() const { return program + " " + std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(batch); }
};

std::vector<BenchCase> bench_cases(bool quick) {
  struct Shape {
    int64_t rows, cols, batch;
    bool gram;
  };
  // Gram NS pays off from aspect ratio about 2 (docs/architecture.md §5); it is benchmarked on the
  // wide shapes.
  std::vector<Shape> shapes = {{4096, 4096, 1, false}, {2048, 8192, 1, true}, {4096, 14336, 1, true}, {1024, 4096, 1, true},
                               {1408, 2048, 64, false}, {128, 2048, 32, true}};
  if (quick) shapes = {{1024, 4096, 1, true}, {128, 2048, 32, true}};
  std::vector<BenchCase> cases;
  for (const char* program : {"jordan_ns5", "polar_express5"})
    for (const Shape& shape : shapes) {
      cases.push_back({program, shape.rows, shape.cols, shape.batch, ir::StrategyKind::Standard});
      if (shape.gram) cases.push_back({program, shape.rows, shape.cols, shape.batch, ir::StrategyKind::Gram});
    }
  return cases;
}

ir::Function schedule(const dsl::Program& program, const BenchCase& c, int64_t batch) {
  passes::CompileOptions options;
  options.rows = c.rows;
  options.cols = c.cols;
  options.batch = batch;
  options.strategy = c.strategy;
  options.precision = ScalarType::BF16;
  return passes::compile_program(program, options);
}

double standard_flops(const BenchCase& c) {
  const double m = static_cast<double>(std::min(c.rows, c.cols)), n = static_cast<double>(std::max(c.rows, c.cols));
  return 5.0 * (4.0 * m * m * n + 2.0 * m * m * m) * static_cast<double>(c.batch);
}

struct Timer {
  cuda::DeviceBuffer flush;
  cuda::EventTimer events;
  int repeats;
  explicit Timer(int repeat_count) : flush(2 * static_cast<int64_t>(cuda::Device::get().info().l2_bytes)), repeats(repeat_count) {}
  // Median milliseconds of `run` with a cold L2 before each call.
  template <class Run>
  double median_ms(Run run) {
    const auto& api = cuda::Device::get().api();
    for (int warmup = 0; warmup < 3; ++warmup) run();
    std::vector<double> times;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      cuda::check(api.cuMemsetD8Async(flush.get(), static_cast<unsigned char>(repeat), static_cast<size_t>(flush.bytes()), nullptr), "L2 flush");
      events.start(nullptr);
      run();
      times.push_back(events.stop(nullptr));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
};

std::map<std::string, double> read_torch_results(const std::string& path) {
  // Lines "program RxCxB median_ms" (scripts/torch_ns_baseline.py writes this plain format so no
  // JSON library is needed on the GPU machine).
  std::map<std::string, double> results;
  std::ifstream file(path);
  std::string program, shape;
  double milliseconds = 0;
  while (file >> program >> shape >> milliseconds) results[program + " " + shape] = milliseconds;
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".", torch_path;
  int repeats = 10;
  bool list = false, quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--out-dir" && i + 1 < argc) out_dir = argv[++i];
    else if (argument == "--torch" && i + 1 < argc) torch_path = argv[++i];
    else if (argument == "--repeats" && i + 1 < argc) repeats = std::max(3, std::atoi(argv[++i]));
    else if (argument == "--list-cases") list = true;
    else if (argument == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: orthojit_gpu_bench [--out-dir DIR] [--torch FILE] [--repeats N] [--list-cases] [--quick]\n");
      return 2;
    }
  }
  const std::vector<BenchCase> cases = bench_cases(quick);
  if (list) {
    // For scripts/torch_ns_baseline.py: "program rows cols batch a,b,c;a,b,c;..." per line.
    std::map<std::string, bool> seen;
    for (const BenchCase& c : cases) {
      if (seen[c.torch_key()]) continue;
      seen[c.torch_key()] = true;
      const dsl::Program program = kernels::load_program_by_name_or_path(c.program);
      std::printf("%s %lld %lld %lld ", c.program.c_str(), static_cast<long long>(c.rows), static_cast<long long>(c.cols), static_cast<long long>(c.batch));
      for (size_t s = 0; s < program.steps.size(); ++s)
        std::printf("%s%.17g,%.17g,%.17g", s ? ";" : "", program.steps[s].a, program.steps[s].b, program.steps[s].c);
      std::printf(" %.17g\n", program.normalization.eps);
    }
    return 0;
  }
  std::string reason;
  if (!cuda::driver(&reason)) {
    std::fprintf(stderr, "orthojit_gpu_bench: %s\n", reason.c_str());
    return 2;
  }
  const cuda::Device& device = cuda::Device::get();
  std::printf("device: %s\n", device.info().describe().c_str());
  const double cublas_tflops = cuda::CublasNewtonSchulz::measure_gemm_tflops(8192, 10);
  std::printf("cuBLAS bf16 GEMM 8192^3: %.1f TFLOP/s (median of 10)\n\n", cublas_tflops);
  const auto torch = torch_path.empty() ? std::map<std::string, double>{} : read_torch_results(torch_path);
  const auto& headers = kernels::cuda_device_headers();

  // Variants per case; their programs compiled in parallel first (NVRTC on every core).
  struct Row {
    BenchCase c;
    std::vector<std::pair<std::string, double>> variants;  // label, ms
    std::string best;
    double best_ms = 0, cublas_ms = 0, cublas_loop_ms = 0, torch_ms = 0;
  };
  std::vector<Row> rows;
  std::vector<std::tuple<size_t, ir::Function, cuda::CudaVariant>> work;
  std::vector<dsl::Program> programs;
  for (const BenchCase& c : cases) {
    programs.push_back(kernels::load_program_by_name_or_path(c.program));
    rows.push_back({c, {}, "", 0, 0, 0, 0});
    const ir::Function function = schedule(programs.back(), c, c.batch);
    std::vector<cuda::CudaVariant> variants(1);
    for (const cuda::TileConfig& tile : cuda::tile_configs()) {
      cuda::CudaVariant variant;
      variant.tile = tile;
      variants.push_back(variant);
    }
    variants.push_back({cuda::CudaVariant::Kind::FusedSmall, std::nullopt});
    for (const auto& variant : variants)
      if (cuda::variant_unavailable_reason(function, variant, device.info().max_shared_per_block_optin).empty())
        work.emplace_back(rows.size() - 1, function, variant);
  }
  {
    const auto start = std::chrono::steady_clock::now();
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
      workers.emplace_back([&] {
        for (size_t index = next++; index < work.size(); index = next++) {
          try {
            const auto& [row, function, variant] = work[index];
            const cuda::CudaProgram generated = cuda::generate_variant(function, variant, device.info().max_shared_per_block_optin);
            cuda::ProgramCache::process_default().get_or_compile(generated.source, headers, device.compile_target());
          } catch (const std::exception&) {
            // reported when the variant is built below
          }
        }
      });
    for (auto& worker : workers) worker.join();
    std::printf("compiled %zu variants in %.1f s\n", work.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  Timer timer(repeats);
  for (size_t r = 0; r < rows.size(); ++r) {
    Row& row = rows[r];
    const BenchCase& c = row.c;
    const int64_t elements = c.rows * c.cols * c.batch;
    const std::vector<double> values = reference::gaussian_values(elements, 1234 + r);
    const std::vector<float> host(values.begin(), values.end());
    cuda::DeviceBuffer input(elements * 4), output(elements * 4);
    input.upload(host.data(), elements * 4);
    std::printf("%s\n", c.key().c_str());
    for (const auto& [row_index, function, variant] : work) {
      if (row_index != r) continue;
      try {
        auto runner = cuda::build_cuda_runner(programs[r], function, variant, headers);
        const double ms = timer.median_ms([&] { runner->run_device(input.get(), output.get(), nullptr); });
        row.variants.emplace_back(variant.label(), ms);
        std::printf("  %-32s %9.3f ms\n", variant.label().c_str(), ms);
        if (row.best.empty() || ms < row.best_ms) {
          row.best = variant.label();
          row.best_ms = ms;
        }
      } catch (const std::exception& error) {
        std::printf("  %-32s failed: %s\n", variant.label().c_str(), error.what());
      }
    }
    try {
      BenchCase standard = c;
      standard.strategy = ir::StrategyKind::Standard;
      const ir::Function function = schedule(programs[r], standard, c.batch);
      auto baseline = cuda::build_cuda_runner(programs[r], function, {cuda::CudaVariant::Kind::Cublas, std::nullopt}, headers);
      row.cublas_ms = timer.median_ms([&] { baseline->run_device(input.get(), output.get(), nullptr); });
      std::printf("  %-32s %9.3f ms\n", "cublas NS (baseline)", row.cublas_ms);
      if (c.batch > 1) {
        // The loop a trainer without batching runs: one matrix at a time.
        const ir::Function single = schedule(programs[r], standard, 1);
        auto looped = cuda::build_cuda_runner(programs[r], single, {cuda::CudaVariant::Kind::Cublas, std::nullopt}, headers);
        const int64_t per_matrix = c.rows * c.cols * 4;
        row.cublas_loop_ms = timer.median_ms([&] {
          for (int64_t z = 0; z < c.batch; ++z)
            looped->run_device(input.get() + static_cast<CUdeviceptr>(z * per_matrix), output.get() + static_cast<CUdeviceptr>(z * per_matrix), nullptr);
        });
        std::printf("  %-32s %9.3f ms\n", "cublas NS looped over the batch", row.cublas_loop_ms);
      }
    } catch (const std::exception& error) {
      std::printf("  cublas baseline failed: %s\n", error.what());
    }
    if (auto found = torch.find(c.torch_key()); found != torch.end()) row.torch_ms = found->second;
  }

  // The table, last.
  std::ostringstream table;
  char line[512];
  std::snprintf(line, sizeof line, "\ncuBLAS bf16 GEMM rate (8192^3): %.1f TFLOP/s on %s\n", cublas_tflops, device.info().name.c_str());
  table << line;
  std::snprintf(line, sizeof line, "%-44s %-26s %9s %8s %7s %9s %9s %9s %9s\n", "case (bf16)", "orthojit best variant", "ms", "TFLOP/s", "of GEMM",
                "x cuBLAS", "x looped", "x torch", "torch ms");
  table << line;
  for (const Row& row : rows) {
    if (row.best.empty()) continue;
    const double tflops = standard_flops(row.c) / (row.best_ms * 1e-3) / 1e12;
    auto ratio = [&](double baseline) { return baseline > 0 ? baseline / row.best_ms : 0.0; };
    std::snprintf(line, sizeof line, "%-44s %-26s %9.3f %8.1f %6.0f%% %8.2fx %8.2fx %8.2fx %9.3f\n", row.c.key().c_str(), row.best.c_str(), row.best_ms, tflops,
                  100.0 * tflops / cublas_tflops, ratio(row.cublas_ms), ratio(row.cublas_loop_ms), ratio(row.torch_ms), row.torch_ms);
    table << line;
  }
  table << "(TFLOP/s: the standard algorithm's FLOPs over orthojit's time; x cuBLAS: the cuBLAS NS of the same program, standard strategy, over "
           "orthojit's time; 0.00x: baseline not run)\n";
  std::printf("%s", table.str().c_str());

  std::ofstream json(out_dir + "/gpu_bench.json");
  json << "{\n  \"device\": \"" << device.info().describe() << "\",\n  \"cublas_gemm_tflops_8192\": " << cublas_tflops << ",\n  \"repeats\": " << repeats
       << ",\n  \"cases\": [\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    json << "    {\"case\": \"" << row.c.key() << "\", \"best\": \"" << row.best << "\", \"best_ms\": " << row.best_ms << ", \"cublas_ms\": " << row.cublas_ms
         << ", \"cublas_looped_ms\": " << row.cublas_loop_ms << ", \"torch_ms\": " << row.torch_ms << ", \"standard_flops\": " << standard_flops(row.c)
         << ", \"variants\": {";
    for (size_t v = 0; v < row.variants.size(); ++v) json << (v ? ", " : "") << "\"" << row.variants[v].first << "\": " << row.variants[v].second;
    json << "}}" << (r + 1 < rows.size() ? "," : "") << "\n";
  }
  json << "  ]\n}\n";
  std::ofstream(out_dir + "/gpu_bench_table.txt") << table.str();
  return 0;
}
