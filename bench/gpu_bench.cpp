// The GPU benchmark of scripts/gpu-check: orthojit's CUDA variants side by side with the
// baselines, in one run, on the shapes of the GPU issues (square, wide, MLP-sized, batched experts
// and heads; bench_cases says which first). Per case every applicable variant is timed (generated with each tile configuration,
// the products on the sm_90a tile on a CC 9.0 device, the fused small-matrix kernel) and the fastest is orthojit's number; the baselines are the
// cuBLASLt Newton–Schulz (cublaslt_newton_schulz.h: C ≠ D, β in the call, heuristic algorithms;
// same program coefficients) in the standard strategy, Gram NS on cuBLASLt (so "Gram vs
// standard" is also measured on one library), the cuBLASLt standard NS looped over the batch
// (for batched cases), the older cuBLAS NS (cublasGemmStridedBatchedEx plus device copies, the
// "x cublas" column), and a plain PyTorch bf16 NS5 when scripts/torch_ns_baseline.py left its
// results (--torch FILE). The cuBLAS bf16 GEMM rate at 8192³ is measured first and
// rates are reported as fractions of it.
//
// Timing: CUDA events around one call, an L2 flush (a memset of twice the L2) before each, 3
// warm-ups, median of --repeats. TFLOP/s counts the standard algorithm's FLOPs (2m²n + 2m³ + 2m²n
// per step, m <= n), so strategies that skip work (gram, triangular products) show as a higher
// effective rate and the rates of all variants of a case compare directly.
//
// Each variant's output is checked once after its timing (poisoned first) against the cuBLASLt NS
// of the same strategy on the same input, within twice the error bounds (both are within them of
// the f64 result); a variant that fails is listed with the error, not timed as orthojit's number.
//
// Failures are results, not aborts: without cuBLAS (a machine whose libcublas cannot be loaded)
// the rate and the cuBLAS columns say why they are missing; a variant or a baseline that fails
// to compile or run is reported with its error in the table and the JSON. gpu_bench.json and
// gpu_bench_table.txt are rewritten after every case ("complete": false until the last), so a
// run stopped by scripts/gpu-check's timeout or by --budget still leaves the cases it measured;
// without a device both files say why and the exit code is 2. Exit code 1 when a case has no
// orthojit variant that ran, 4 when a failure poisoned the CUDA context (below).
//
// A hung kernel and a poisoned context (the sm_90a tile's wgmma/TMA/mbarrier kernels are the
// likeliest): "RUN <case>" before each case and "RUN <case> [<variant or baseline>]" before each
// thing timed, flushed, so that a run killed while a kernel hangs names it. A failure that leaves
// the CUDA context unusable (cuda/sticky_error.h: an illegal address, a launch failure; every
// later call in the process would fail for its reason) stops the run: "STICKY <what>: <error>",
// the cases not started marked so in both files ("stopped" in the JSON), exit code 4.
// ORTHOJIT_CUDA_SM90A=off (cuda/sm90a_switch.h) leaves the sm_90a variants and the tile's rate
// out, saying why ("sm90a_off" in the JSON).
//
// Usage: orthojit_gpu_bench [--out-dir DIR] [--torch FILE] [--repeats N] [--budget SECONDS]
//                           [--case-timeout SECONDS] [--list-cases] [--quick] [--prewarm sm_XX]
//   --budget: stop starting cases after SECONDS (those left are listed as not run).
//   --case-timeout: the watchdog's limit on one timed thing (default 120 s; 0: none): past it the
//     run ends with "HUNG <what> after N s" and exit code 3.
//   --prewarm: no device; compile every variant for a device of that kind into the program cache
//     (ORTHOJIT_CACHE_DIR), as scripts/gpu-kit does before a device run. Exit 1 if one fails.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "autotune/error_measure.h"
#include "bench/hang_watchdog.h"
#include "bench/json_text.h"
#include "cuda/cublas_newton_schulz.h"
#include "cuda/cublaslt_newton_schulz.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_driver.h"
#include "cuda/hopper_product.h"
#include "cuda/sm90a_switch.h"
#include "cuda/sm_count_override.h"
#include "cuda/sticky_error.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/random_matrix.h"

namespace {

using namespace orthojit;
using bench::json_string;

struct BenchCase {
  std::string program;
  int64_t rows, cols, batch;
  ir::StrategyKind strategy;
  std::string key() const {
    return program + " " + std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(batch) + " " + ir::to_string(strategy);
  }
  std::string torch_key() const { return program + " " + std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(batch); }
};

// In priority order: a run that --budget cuts short has measured what matters most. First the
// shapes of the GPU issue's numbers on jordan_ns5 (standard 4096²; Gram at 1024x4096 and
// 2048x11008 against the cuBLASLt standard NS; 64 experts of 1408x2048 and 32 heads of 128x512
// against a loop of cuBLASLt NS), then issue 5's other shapes, then polar_express5 on all of them.
// --quick: the headline shapes only.
std::vector<BenchCase> bench_cases(bool quick) {
  struct Shape {
    int64_t rows, cols, batch;
    bool gram;
  };
  // Gram NS pays off from aspect ratio about 2 (docs/architecture.md §5); it is benchmarked on the
  // wide shapes.
  const std::vector<Shape> headline = {{4096, 4096, 1, false}, {1024, 4096, 1, true}, {2048, 11008, 1, true}, {1408, 2048, 64, false}, {128, 512, 32, true}};
  const std::vector<Shape> others = {{2048, 8192, 1, true}, {4096, 14336, 1, true}, {128, 2048, 32, true}};
  std::vector<BenchCase> cases;
  auto add = [&](const char* program, const std::vector<Shape>& shapes) {
    for (const Shape& shape : shapes) {
      if (shape.gram) cases.push_back({program, shape.rows, shape.cols, shape.batch, ir::StrategyKind::Gram});
      cases.push_back({program, shape.rows, shape.cols, shape.batch, ir::StrategyKind::Standard});
    }
  };
  add("jordan_ns5", headline);
  if (quick) return cases;
  add("jordan_ns5", others);
  add("polar_express5", headline);
  add("polar_express5", others);
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

// The first line of an error, short enough for a table cell.
std::string brief(const std::string& text, size_t width = 60) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() <= width ? line : line.substr(0, width - 3) + "...";
}

struct Row {
  BenchCase c;
  std::vector<std::pair<std::string, double>> variants;  // label, ms
  std::vector<std::pair<std::string, std::string>> failures;  // label, error
  std::string best;
  double best_ms = 0, cublas_ms = 0, cublas_loop_ms = 0, torch_ms = 0;
  double lt_ms = 0, lt_gram_ms = 0, lt_loop_ms = 0;  // cuBLASLt: standard NS, Gram NS, standard looped over the batch
  std::string cublas_error, lt_error, lt_gram_error, status = "not run";  // status: "ok", "failed: ...", "not run (budget)"
  std::string unchecked;  // why the variants' outputs were not checked (empty: each was, against the cuBLASLt NS)
};

struct Report {
  std::string device, device_error;  // device_error: why nothing ran
  double cublas_tflops = 0;
  std::string cublas_error;  // why there is no cuBLAS rate
  // The sm_90a product tile alone at 8192^3 (bf16 in, bf16 D, K-major and MN-major B): TFLOP/s,
  // 128x128 and 128x256 (wide).
  double hopper_k_tflops = 0, hopper_mn_tflops = 0, hopper_wide_k_tflops = 0, hopper_wide_mn_tflops = 0;
  std::string hopper_error;  // why it was not measured (not a 9.0 device, a failure)
  int repeats = 0;
  bool complete = false;
  std::string stopped;  // "<what>: <error>" when a failure poisoned the context and ended the run
  std::vector<Row> rows;
};

// The sm_90a product tile's rate at n^3 (median of `repeats`, random bf16 operands as cuBLAS's
// rate is measured on), in the same run as cuBLAS's; throws when the device cannot run it.
double hopper_product_tflops(bool b_mn_major, bool wide, int64_t n, int repeats) {
  const cuda::HopperProductSpec spec{b_mn_major, ScalarType::BF16, false, wide};  // D = A·B, no C
  const std::string reason = cuda::hopper_product_unsupported_reason(spec, n, n, n, cuda::Device::get().info().sm);
  if (!reason.empty()) throw std::runtime_error(reason);
  const cuda::HopperProduct kernel(spec, kernels::cuda_device_headers());
  cuda::DeviceBuffer a(n * n * 2), b(n * n * 2), d(n * n * 2);
  // cuBLAS's operands and warm-up, so that both run at the same switching power and clocks.
  const std::vector<uint16_t> host = cuda::CublasNewtonSchulz::rate_operand_bits(n * n);
  a.upload(host.data(), n * n * 2);
  b.upload(host.data(), n * n * 2);
  auto product = [&] { kernel.run(a.get(), b.get(), 0, d.get(), n, n, n, n, n, 1.0f, 0.0f, 0.0f, nullptr); };
  cuda::warm_up_for(500, product);
  cuda::EventTimer timer;
  std::vector<float> times;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    timer.start(nullptr);
    product();
    times.push_back(timer.stop(nullptr));
  }
  std::sort(times.begin(), times.end());
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (times[times.size() / 2] * 1e-3) * 1e-12;
}

std::string table_text(const Report& report) {
  std::ostringstream table;
  char line[1024];
  if (!report.device_error.empty()) {
    table << "\nno GPU benchmark: " << report.device_error << "\n";
    return table.str();
  }
  if (report.cublas_error.empty()) std::snprintf(line, sizeof line, "\ncuBLAS bf16 GEMM rate (8192^3): %.1f TFLOP/s on %s\n", report.cublas_tflops, report.device.c_str());
  else std::snprintf(line, sizeof line, "\ncuBLAS bf16 GEMM rate: not measured (%s) on %s\n", brief(report.cublas_error, 200).c_str(), report.device.c_str());
  table << line;
  if (report.hopper_error.empty()) {
    std::snprintf(line, sizeof line, "sm_90a product tile (8192^3): K-major B %.1f TFLOP/s, MN-major B %.1f TFLOP/s", report.hopper_k_tflops, report.hopper_mn_tflops);
    table << line;
    if (report.cublas_tflops > 0) {
      std::snprintf(line, sizeof line, " (%.0f%% and %.0f%% of cuBLAS)", 100.0 * report.hopper_k_tflops / report.cublas_tflops, 100.0 * report.hopper_mn_tflops / report.cublas_tflops);
      table << line;
    }
    std::snprintf(line, sizeof line, "\nsm_90a 128x256 tile (8192^3): K-major B %.1f TFLOP/s, MN-major B %.1f TFLOP/s", report.hopper_wide_k_tflops, report.hopper_wide_mn_tflops);
    table << line;
    if (report.cublas_tflops > 0) {
      std::snprintf(line, sizeof line, " (%.0f%% and %.0f%% of cuBLAS)", 100.0 * report.hopper_wide_k_tflops / report.cublas_tflops,
                    100.0 * report.hopper_wide_mn_tflops / report.cublas_tflops);
      table << line;
    }
    table << "\n";
  } else {
    table << "sm_90a product tile: not measured (" << brief(report.hopper_error, 200) << ")\n";
  }
  std::snprintf(line, sizeof line, "%-44s %-26s %9s %8s %7s %9s %9s %9s %9s %9s %9s %9s %9s\n", "case (bf16)", "orthojit best variant", "ms", "TFLOP/s",
                "of GEMM", "x LtNS", "x LtGram", "x LtLoop", "LtNS ms", "x cublas", "x looped", "x torch", "torch ms");
  table << line;
  auto ratio = [](double baseline, double ms) {
    char cell[32];
    if (baseline > 0) std::snprintf(cell, sizeof cell, "%8.2fx", baseline / ms);
    else std::snprintf(cell, sizeof cell, "%9s", "-");
    return std::string(cell);
  };
  for (const Row& row : report.rows) {
    if (row.best.empty()) {
      std::snprintf(line, sizeof line, "%-44s %s\n", row.c.key().c_str(), brief(row.status, 120).c_str());
      table << line;
      continue;
    }
    const double tflops = standard_flops(row.c) / (row.best_ms * 1e-3) / 1e12;
    char of_gemm[16];
    if (report.cublas_tflops > 0) std::snprintf(of_gemm, sizeof of_gemm, "%6.0f%%", 100.0 * tflops / report.cublas_tflops);
    else std::snprintf(of_gemm, sizeof of_gemm, "%7s", "-");
    char torch_ms[16];
    if (row.torch_ms > 0) std::snprintf(torch_ms, sizeof torch_ms, "%9.3f", row.torch_ms);
    else std::snprintf(torch_ms, sizeof torch_ms, "%9s", "-");
    char lt_ms[16];
    if (row.lt_ms > 0) std::snprintf(lt_ms, sizeof lt_ms, "%9.3f", row.lt_ms);
    else std::snprintf(lt_ms, sizeof lt_ms, "%9s", "-");
    std::snprintf(line, sizeof line, "%-44s %-26s %9.3f %8.1f %s %s %s %s %s %s %s %s %s\n", row.c.key().c_str(), row.best.c_str(), row.best_ms, tflops,
                  of_gemm, ratio(row.lt_ms, row.best_ms).c_str(), ratio(row.lt_gram_ms, row.best_ms).c_str(), ratio(row.lt_loop_ms, row.best_ms).c_str(), lt_ms,
                  ratio(row.cublas_ms, row.best_ms).c_str(), ratio(row.cublas_loop_ms, row.best_ms).c_str(), ratio(row.torch_ms, row.best_ms).c_str(), torch_ms);
    table << line;
  }
  table << "(TFLOP/s: the standard algorithm's FLOPs over orthojit's time; x LtNS: the cuBLASLt NS of the same program, standard strategy, over "
           "orthojit's time; x LtGram: Gram NS on cuBLASLt over orthojit's time; x LtLoop: the cuBLASLt NS one matrix at a time; x cublas, x looped: "
           "the older cublasGemmStridedBatchedEx NS, batched and one matrix at a time; -: baseline not run)\n";
  // What failed, once per message, after the table (the JSON has every one).
  std::map<std::string, int> failures;
  for (const Row& row : report.rows) {
    if (!row.cublas_error.empty()) ++failures["cublas baseline: " + brief(row.cublas_error, 160)];
    if (!row.lt_error.empty()) ++failures["cublaslt standard baseline: " + brief(row.lt_error, 160)];
    if (!row.lt_gram_error.empty()) ++failures["cublaslt gram baseline: " + brief(row.lt_gram_error, 160)];
    for (const auto& [label, error] : row.failures) ++failures[label + ": " + brief(error, 160)];
    if (!row.unchecked.empty()) ++failures[brief(row.unchecked, 200)];
  }
  for (const auto& [what, count] : failures) table << "failed" << (count > 1 ? " (" + std::to_string(count) + " cases)" : std::string()) << ": " << what << "\n";
  if (!report.stopped.empty()) table << "stopped: the CUDA context was unusable after " << brief(report.stopped, 300) << "\n";
  if (!report.complete) table << "(incomplete: the run stopped before the last case)\n";
  return table.str();
}

void write_outputs(const std::string& out_dir, const Report& report) {
  std::ofstream json(out_dir + "/gpu_bench.json");
  json << "{\n  \"device\": " << json_string(report.device) << ",\n  \"device_error\": " << json_string(report.device_error)
       << ",\n  \"cublas_gemm_tflops_8192\": " << report.cublas_tflops << ",\n  \"cublas_error\": " << json_string(report.cublas_error)
       << ",\n  \"hopper_product_kmajor_tflops_8192\": " << report.hopper_k_tflops << ",\n  \"hopper_product_mnmajor_tflops_8192\": " << report.hopper_mn_tflops
       << ",\n  \"hopper_product_wide_kmajor_tflops_8192\": " << report.hopper_wide_k_tflops
       << ",\n  \"hopper_product_wide_mnmajor_tflops_8192\": " << report.hopper_wide_mn_tflops
       << ",\n  \"hopper_product_error\": " << json_string(report.hopper_error)
       << ",\n  \"sm90a_off\": " << json_string(cuda::sm90a_disabled_reason()) << ",\n  \"repeats\": " << report.repeats
       << ",\n  \"complete\": " << (report.complete ? "true" : "false") << ",\n  \"stopped\": " << json_string(report.stopped) << ",\n  \"cases\": [\n";
  for (size_t r = 0; r < report.rows.size(); ++r) {
    const Row& row = report.rows[r];
    json << "    {\"case\": " << json_string(row.c.key()) << ", \"status\": " << json_string(row.status) << ", \"best\": " << json_string(row.best)
         << ", \"best_ms\": " << row.best_ms << ", \"cublas_ms\": " << row.cublas_ms << ", \"cublas_looped_ms\": " << row.cublas_loop_ms
         << ", \"cublas_error\": " << json_string(row.cublas_error) << ", \"cublaslt_ms\": " << row.lt_ms << ", \"cublaslt_gram_ms\": " << row.lt_gram_ms
         << ", \"cublaslt_looped_ms\": " << row.lt_loop_ms << ", \"cublaslt_error\": " << json_string(row.lt_error)
         << ", \"cublaslt_gram_error\": " << json_string(row.lt_gram_error) << ", \"outputs_unchecked\": " << json_string(row.unchecked) << ", \"torch_ms\": " << row.torch_ms << ", \"standard_flops\": " << standard_flops(row.c)
         << ", \"variants\": {";
    for (size_t v = 0; v < row.variants.size(); ++v) json << (v ? ", " : "") << json_string(row.variants[v].first) << ": " << row.variants[v].second;
    json << "}, \"failures\": {";
    for (size_t v = 0; v < row.failures.size(); ++v) json << (v ? ", " : "") << json_string(row.failures[v].first) << ": " << json_string(row.failures[v].second);
    json << "}}" << (r + 1 < report.rows.size() ? "," : "") << "\n";
  }
  json << "  ]\n}\n";
  std::ofstream(out_dir + "/gpu_bench_table.txt") << table_text(report);
}

// The watchdog (--case-timeout; bench/hang_watchdog.h): made in main once the device is up.
std::unique_ptr<bench::HangWatchdog> watchdog;

// "RUN <what>", flushed: a run killed while `what` hangs names it; the watchdog times it from now.
void announce(const std::string& what) {
  std::printf("RUN %s\n", what.c_str());
  std::fflush(stdout);
  if (watchdog) watchdog->begin(what);
}

// Compiles are not timed by the watchdog (minutes on a cold cache are not a hang): paused until
// the next announce.
void pause_watchdog() {
  if (watchdog) watchdog->idle();
}

// After `failure` of `what` (in row `current`, or none: report.rows.size()): when it left the
// context unusable, every later call would fail for its reason; the run stops with exit code 4,
// the rows not started marked so, both files written.
void stop_if_sticky(const std::exception& failure, const std::string& what, Report& report, size_t current, const std::string& out_dir) {
  const std::string sticky = cuda::sticky_error_after(failure);
  if (sticky.empty()) return;
  std::printf("STICKY %s: %s\n", what.c_str(), sticky.c_str());
  report.stopped = what + ": " + sticky;
  for (size_t r = 0; r < report.rows.size(); ++r) {
    if (r == current) report.rows[r].status = "failed: poisoned the CUDA context: " + sticky;
    else if (report.rows[r].status == "not run") report.rows[r].status = "not run (the CUDA context was unusable after " + what + ")";
  }
  write_outputs(out_dir, report);
  std::printf("%s", table_text(report).c_str());
  std::fflush(stdout);
  std::_Exit(4);  // no static destructors: they would call into the poisoned context
}

// One orthojit variant of one case (row), timed after its program is compiled.
struct Work {
  size_t row;
  ir::Function function;
  cuda::CudaVariant variant;
  std::string error;  // the compile's, reported when the variant is timed
};

// Every applicable variant of every case on a device of compute capability `sm` with
// `shared_limit` bytes of opt-in shared memory per block: the default, each tile configuration, the
// fused small-matrix kernel and, on 9.0, the products on the sm_90a tile (unless
// ORTHOJIT_CUDA_SM90A turns it off). `programs` gets one program per row (rows[i] <-> programs[i]);
// a row whose schedule fails is marked failed.
std::vector<Work> variant_work(std::vector<Row>& rows, std::vector<dsl::Program>& programs, int sm, int shared_limit) {
  std::vector<Work> work;
  for (Row& row : rows) {
    const BenchCase& c = row.c;
    programs.push_back(kernels::load_program_by_name_or_path(c.program));
    try {
      const ir::Function function = schedule(programs.back(), c, c.batch);
      std::vector<cuda::CudaVariant> variants(1);
      for (const cuda::TileConfig& tile : cuda::tile_configs()) {
        cuda::CudaVariant variant;
        variant.tile = tile;
        variants.push_back(variant);
      }
      variants.push_back({cuda::CudaVariant::Kind::FusedSmall, std::nullopt});
      if (sm == 90 && cuda::sm90a_disabled_reason().empty()) {
        cuda::CudaVariant hopper;
        hopper.hopper = true;
        variants.push_back(hopper);
      }
      for (const auto& variant : variants)
        if (cuda::variant_unavailable_reason(function, variant, shared_limit).empty()) work.push_back({programs.size() - 1, function, variant, ""});
    } catch (const std::exception& error) {
      row.status = std::string("failed: scheduling: ") + error.what();
    }
  }
  return work;
}

// Compiles the variants of `row` (every row when row == npos) through the process's program cache,
// NVRTC on every core; a variant that fails keeps its error. `stop()` returning a reason leaves the
// variants not yet started uncompiled, with that reason. Returns how many variants it handled.
template <class Stop>
size_t compile_variants(std::vector<Work>& work, size_t row, const std::string& device_target, int shared_limit, int multiprocessors, Stop stop) {
  const auto& headers = kernels::cuda_device_headers();
  std::vector<size_t> items;
  for (size_t index = 0; index < work.size(); ++index)
    if (row == std::string::npos || work[index].row == row) items.push_back(index);
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  const size_t threads = std::min<size_t>(items.size(), std::max(1u, std::thread::hardware_concurrency()));
  for (size_t t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      for (size_t i = next++; i < items.size(); i = next++) {
        Work& item = work[items[i]];
        if (std::string why = stop(); !why.empty()) {
          item.error = why;
          continue;
        }
        try {
          // The SMs the runner will generate for (the device's, or an H100/H200's 132 in --prewarm),
          // so that it finds this very program in the cache.
          const cuda::CudaProgram generated = cuda::generate_variant(item.function, item.variant, shared_limit, multiprocessors);
          cuda::ProgramCache::process_default().get_or_compile(generated.source, headers, generated.compile_target(device_target));
        } catch (const std::exception& error) {
          item.error = error.what();
        }
      }
    });
  for (auto& worker : workers) worker.join();
  return items.size();
}

// --prewarm sm_XX: every variant compiled into the program cache for a device of that kind, with
// no device (scripts/gpu-kit packs the cache so that the lent GPU's minutes are not spent in NVRTC).
int prewarm(const std::string& target, bool quick) {
  int sm = 0;
  if (std::sscanf(target.c_str(), "sm_%d", &sm) != 1 || sm < 80) {
    std::fprintf(stderr, "orthojit_gpu_bench: --prewarm %s: expected sm_80 or newer, as sm_90\n", target.c_str());
    return 2;
  }
  const int shared_limit = sm >= 90 ? 227 * 1024 : 163 * 1024;  // an H100/H200's opt-in shared memory, else an A100's
  std::vector<Row> rows;
  for (const BenchCase& c : bench_cases(quick)) {
    Row row{};
    row.c = c;
    rows.push_back(row);
  }
  std::vector<dsl::Program> programs;
  std::vector<Work> work = variant_work(rows, programs, sm, shared_limit);
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> done{0};
  const size_t count = compile_variants(work, std::string::npos, target, shared_limit, cuda::multiprocessors_to_use(132), [&] {
    const int finished = done++;
    if (finished % 10 == 0) std::printf("  compiling %d/%zu variants\n", finished, work.size()), std::fflush(stdout);
    return std::string();
  });
  int failed = 0;
  for (const Row& row : rows)
    if (row.status != "not run") ++failed, std::printf("FAIL %s: %s\n", row.c.key().c_str(), row.status.c_str());
  for (const Work& item : work)
    if (!item.error.empty()) ++failed, std::printf("FAIL %s [%s]: %s\n", rows[item.row].c.key().c_str(), item.variant.label().c_str(), brief(item.error, 300).c_str());
  std::printf("prewarmed %zu variants of %zu cases for %s in %.1f s (%d failed) into %s\n", count, rows.size(), target.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), failed,
              cuda::ProgramCache::process_default().directory().string().c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".", torch_path;
  int repeats = 10;
  double budget_seconds = 0, case_timeout = 120;
  bool list = false, quick = false;
  std::string prewarm_target;
  const char* usage = "usage: orthojit_gpu_bench [--out-dir DIR] [--torch FILE] [--repeats N] [--budget SECONDS] [--case-timeout SECONDS] [--list-cases] [--quick] [--prewarm sm_XX]\n";
  // A number that does not parse is a usage error, not 0: "--case-timeout 6O" must not turn the
  // watchdog off, nor "--budget 5m" the budget.
  bool bad_number = false;
  auto number = [&](const std::string& flag, const char* text, double least) {
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    if (end == text || *end != '\0' || !std::isfinite(value) || value < least) {
      std::fprintf(stderr, "orthojit_gpu_bench: %s takes a number >= %g, not \"%s\"\n", flag.c_str(), least, text);
      bad_number = true;
    }
    return value;
  };
  for (int i = 1; i < argc && !bad_number; ++i) {
    const std::string argument = argv[i];
    if (argument == "--out-dir" && i + 1 < argc) out_dir = argv[++i];
    else if (argument == "--torch" && i + 1 < argc) torch_path = argv[++i];
    else if (argument == "--repeats" && i + 1 < argc) repeats = static_cast<int>(std::max(3.0, number(argument, argv[++i], 1)));
    else if (argument == "--budget" && i + 1 < argc) budget_seconds = number(argument, argv[++i], 0);
    else if (argument == "--case-timeout" && i + 1 < argc) case_timeout = number(argument, argv[++i], 0);
    else if (argument == "--list-cases") list = true;
    else if (argument == "--quick") quick = true;
    else if (argument == "--prewarm" && i + 1 < argc) prewarm_target = argv[++i];
    else {
      std::fputs(usage, stderr);
      return 2;
    }
  }
  if (bad_number) {
    std::fputs(usage, stderr);
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (!prewarm_target.empty()) return prewarm(prewarm_target, quick);
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
  Report report;
  report.repeats = repeats;
  for (const BenchCase& c : cases) {
    Row row{};
    row.c = c;
    report.rows.push_back(row);
  }
  std::string reason;
  if (!cuda::driver(&reason)) report.device_error = reason;
  else
    try {
      cuda::Device::get();
    } catch (const std::exception& error) {
      report.device_error = error.what();
    }
  if (!report.device_error.empty()) {
    std::fprintf(stderr, "orthojit_gpu_bench: %s\n", report.device_error.c_str());
    write_outputs(out_dir, report);
    return 2;
  }
  const cuda::Device& device = cuda::Device::get();
  report.device = device.info().describe();
  std::printf("device: %s\n", report.device.c_str());
  // A hang ends the run with "HUNG <what> after N s" and exit code 3; the table and the JSON hold
  // every case before it (they are written after each), so scripts/gpu-check keeps the rest of
  // its phase, turns the sm_90a tile off when that was it, and runs the benchmark again.
  watchdog = std::make_unique<bench::HangWatchdog>(case_timeout);
  // The yardstick; without cuBLAS the run goes on and the table says why the column is empty.
  report.cublas_error = cuda::CublasNewtonSchulz::unavailable_reason();
  if (report.cublas_error.empty()) try {
      announce("cublas bf16 GEMM 8192^3");
      report.cublas_tflops = cuda::CublasNewtonSchulz::measure_gemm_tflops(8192, 10);
      std::printf("cuBLAS bf16 GEMM 8192^3: %.1f TFLOP/s (median of 10)\n\n", report.cublas_tflops);
    } catch (const std::exception& error) {
      report.cublas_error = error.what();
      stop_if_sticky(error, "cublas bf16 GEMM 8192^3", report, report.rows.size(), out_dir);
    }
  if (!report.cublas_error.empty()) std::printf("cuBLAS bf16 GEMM rate not measured: %s\n\n", report.cublas_error.c_str());
  std::string hopper_running;
  try {
    const std::pair<bool, bool> layouts[] = {{false, false}, {true, false}, {false, true}, {true, true}};  // (MN-major B, 128x256)
    double* rates[] = {&report.hopper_k_tflops, &report.hopper_mn_tflops, &report.hopper_wide_k_tflops, &report.hopper_wide_mn_tflops};
    for (int which = 0; which < 4; ++which) {
      const auto [b_mn_major, wide] = layouts[which];
      hopper_running = std::string("sm_90a ") + (wide ? "128x256" : "128x128") + " tile 8192^3, " + (b_mn_major ? "MN-major" : "K-major") + " B";
      if (cuda::hopper_product_unsupported_reason({b_mn_major, ScalarType::BF16, false, wide}, 8192, 8192, 8192, device.info().sm).empty()) announce(hopper_running);
      *rates[which] = hopper_product_tflops(b_mn_major, wide, 8192, 10);
      if (which == 1) std::printf("sm_90a product tile 8192^3: K-major B %.1f, MN-major B %.1f TFLOP/s (medians of 10)\n", report.hopper_k_tflops, report.hopper_mn_tflops);
    }
    std::printf("sm_90a 128x256 tile 8192^3: K-major B %.1f, MN-major B %.1f TFLOP/s (medians of 10)\n\n", report.hopper_wide_k_tflops, report.hopper_wide_mn_tflops);
  } catch (const std::exception& error) {
    report.hopper_error = error.what();
    std::printf("sm_90a product tile not measured: %s\n\n", report.hopper_error.c_str());
    stop_if_sticky(error, hopper_running, report, report.rows.size(), out_dir);
  }
  write_outputs(out_dir, report);
  const auto torch = torch_path.empty() ? std::map<std::string, double>{} : read_torch_results(torch_path);
  const auto& headers = kernels::cuda_device_headers();

  std::vector<dsl::Program> programs;
  std::vector<Work> work = variant_work(report.rows, programs, device.info().sm, device.info().max_shared_per_block_optin);
  if (const std::string off = cuda::sm90a_disabled_reason(); !off.empty() && device.info().sm == 90)
    std::printf("the generated hopper variant (products on the sm_90a tile) left out: %s\n", off.c_str());
  // Each case's variants are compiled (NVRTC on every core) just before the case is timed, not all
  // up front: compiling every variant of every case first could spend the whole --budget before a
  // single case was timed.
  double compile_seconds = 0;
  auto compile_case = [&](size_t row) {
    pause_watchdog();
    const auto compile_start = std::chrono::steady_clock::now();
    const size_t count = compile_variants(work, row, device.compile_target(), device.info().max_shared_per_block_optin, std::max(1, device.info().multiprocessors), [&] {
      return budget_seconds > 0 && elapsed() > budget_seconds ? "not compiled: --budget " + std::to_string(static_cast<int>(budget_seconds)) + " s spent" : std::string();
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
    compile_seconds += seconds;
    std::printf("  compiled %zu variants in %.1f s\n", count, seconds);
  };

  int without_result = 0;
  std::unique_ptr<Timer> timer;
  for (size_t r = 0; r < report.rows.size(); ++r) {
    Row& row = report.rows[r];
    const BenchCase& c = row.c;
    if (row.status != "not run") {
      ++without_result;
      continue;
    }
    if (budget_seconds > 0 && elapsed() > budget_seconds) {
      row.status = "not run (--budget " + std::to_string(static_cast<int>(budget_seconds)) + " s spent)";
      continue;
    }
    announce(c.key());
    compile_case(r);
    try {
      if (!timer) timer = std::make_unique<Timer>(repeats);
      const int64_t elements = c.rows * c.cols * c.batch;
      const std::vector<double> values = reference::gaussian_values(elements, 1234 + r);
      const std::vector<float> host(values.begin(), values.end());
      cuda::DeviceBuffer input(elements * 4), output(elements * 4);
      input.upload(host.data(), elements * 4);
      // What each variant's output is checked against: the cuBLASLt NS of the case's strategy on
      // the same input. A variant that computes something else (a skipped tile, a wrong
      // coefficient) must not be timed as orthojit's number. Both are within the error bounds of
      // the f64 result, so they agree within twice them (autotune/error_measure.h).
      const auto& api = cuda::Device::get().api();
      std::vector<float> produced(static_cast<size_t>(elements));
      auto run_once = [&](const cuda::CudaRunner& runner) {
        cuda::check(api.cuMemsetD8Async(output.get(), 0xff, static_cast<size_t>(elements * 4), nullptr), "poisoning the output");
        runner.run_device(input.get(), output.get(), nullptr);
        cuda::check(api.cuCtxSynchronize(), "running " + runner.description());
        output.download(produced.data(), elements * 4);
      };
      std::vector<double> expected;
      autotune::ErrorBounds agreement;
      try {
        const ir::Function function = schedule(programs[r], c, c.batch);
        const cuda::CudaVariant lt{cuda::CudaVariant::Kind::Cublaslt, std::nullopt};
        if (std::string why = cuda::variant_unavailable_reason(function, lt, 0); !why.empty()) throw std::runtime_error(why);
        announce(c.key() + " [cublaslt output, the variants' check]");
        run_once(*cuda::build_cuda_runner(programs[r], function, lt, headers));
        expected.assign(produced.begin(), produced.end());
        agreement = autotune::error_bounds(function);
        agreement.tile *= 2;
        agreement.frobenius *= 2;
      } catch (const std::exception& error) {
        row.unchecked = std::string("outputs not checked: no cuBLASLt result (") + brief(error.what(), 200) + ")";
        std::printf("  %s\n", row.unchecked.c_str());
        stop_if_sticky(error, c.key() + " [cublaslt output]", report, r, out_dir);
      }
      for (const Work& item : work) {
        if (item.row != r) continue;
        const std::string label = item.variant.label();
        try {
          if (!item.error.empty()) throw std::runtime_error(item.error);
          announce(c.key() + " [" + label + "]");
          auto runner = cuda::build_cuda_runner(programs[r], item.function, item.variant, headers);
          const double ms = timer->median_ms([&] { runner->run_device(input.get(), output.get(), nullptr); });
          if (!expected.empty()) {
            run_once(*runner);
            const autotune::ErrorMeasure measure = autotune::measure_error(produced.data(), expected.data(), c.rows, c.cols, c.batch);
            if (!autotune::within(measure, agreement))
              throw std::runtime_error("wrong output (against the cuBLASLt NS, twice the error bounds): " +
                                       (measure.finite ? autotune::describe_violation(measure, agreement, c.rows, c.cols)
                                                       : std::to_string(measure.nonfinite_count) + " non-finite values, " + std::to_string(measure.poison_count) + " never written") +
                                       "; its time is not reported");
          }
          row.variants.emplace_back(label, ms);
          std::printf("  %-32s %9.3f ms\n", label.c_str(), ms);
          if (row.best.empty() || ms < row.best_ms) {
            row.best = label;
            row.best_ms = ms;
          }
        } catch (const std::exception& error) {
          row.failures.emplace_back(label, error.what());
          std::printf("  %-32s failed: %s\n", label.c_str(), brief(error.what(), 200).c_str());
          stop_if_sticky(error, c.key() + " [" + label + "]", report, r, out_dir);
        }
      }
      if (!report.cublas_error.empty()) row.cublas_error = report.cublas_error;
      else
        try {
          BenchCase standard = c;
          standard.strategy = ir::StrategyKind::Standard;
          const ir::Function function = schedule(programs[r], standard, c.batch);
          announce(c.key() + " [cublas NS baseline]");
          auto baseline = cuda::build_cuda_runner(programs[r], function, {cuda::CudaVariant::Kind::Cublas, std::nullopt}, headers);
          row.cublas_ms = timer->median_ms([&] { baseline->run_device(input.get(), output.get(), nullptr); });
          std::printf("  %-32s %9.3f ms\n", "cublas NS (baseline)", row.cublas_ms);
          if (c.batch > 1) {
            // The loop a trainer without batching runs: one matrix at a time.
            const ir::Function single = schedule(programs[r], standard, 1);
            auto looped = cuda::build_cuda_runner(programs[r], single, {cuda::CudaVariant::Kind::Cublas, std::nullopt}, headers);
            const int64_t per_matrix = c.rows * c.cols * 4;
            row.cublas_loop_ms = timer->median_ms([&] {
              for (int64_t z = 0; z < c.batch; ++z)
                looped->run_device(input.get() + static_cast<CUdeviceptr>(z * per_matrix), output.get() + static_cast<CUdeviceptr>(z * per_matrix), nullptr);
            });
            std::printf("  %-32s %9.3f ms\n", "cublas NS looped over the batch", row.cublas_loop_ms);
          }
        } catch (const std::exception& error) {
          row.cublas_error = error.what();
          std::printf("  cublas baseline failed: %s\n", brief(error.what(), 200).c_str());
          stop_if_sticky(error, c.key() + " [cublas NS baseline]", report, r, out_dir);
        }
      // The cuBLASLt baselines: standard NS (batched, and looped for batched cases), and Gram NS;
      // measured once per program and shape (the standard and gram rows of a shape share them).
      static std::map<std::string, Row> lt_measured;
      if (auto done = lt_measured.find(c.torch_key()); done != lt_measured.end()) {
        row.lt_ms = done->second.lt_ms;
        row.lt_gram_ms = done->second.lt_gram_ms;
        row.lt_loop_ms = done->second.lt_loop_ms;
        row.lt_error = done->second.lt_error;
        row.lt_gram_error = done->second.lt_gram_error;
      } else
      for (ir::StrategyKind strategy : {ir::StrategyKind::Standard, ir::StrategyKind::Gram}) {
        const bool gram = strategy == ir::StrategyKind::Gram;
        std::string& error_text = gram ? row.lt_gram_error : row.lt_error;
        try {
          BenchCase variant_case = c;
          variant_case.strategy = strategy;
          const ir::Function function = schedule(programs[r], variant_case, c.batch);
          const cuda::CudaVariant lt{cuda::CudaVariant::Kind::Cublaslt, std::nullopt};
          if (std::string why = cuda::variant_unavailable_reason(function, lt, 0); !why.empty()) throw std::runtime_error(why);
          announce(c.key() + (gram ? " [cublaslt gram NS baseline]" : " [cublaslt NS baseline]"));
          auto baseline = cuda::build_cuda_runner(programs[r], function, lt, headers);
          double& ms = gram ? row.lt_gram_ms : row.lt_ms;
          ms = timer->median_ms([&] { baseline->run_device(input.get(), output.get(), nullptr); });
          std::printf("  %-32s %9.3f ms\n", gram ? "cublaslt gram NS (baseline)" : "cublaslt NS (baseline)", ms);
          if (!gram && c.batch > 1) {
            const ir::Function single = schedule(programs[r], variant_case, 1);
            auto looped = cuda::build_cuda_runner(programs[r], single, lt, headers);
            const int64_t per_matrix = c.rows * c.cols * 4;
            row.lt_loop_ms = timer->median_ms([&] {
              for (int64_t z = 0; z < c.batch; ++z)
                looped->run_device(input.get() + static_cast<CUdeviceptr>(z * per_matrix), output.get() + static_cast<CUdeviceptr>(z * per_matrix), nullptr);
            });
            std::printf("  %-32s %9.3f ms\n", "cublaslt NS looped over the batch", row.lt_loop_ms);
          }
        } catch (const std::exception& error) {
          error_text = error.what();
          std::printf("  cublaslt %s baseline failed: %s\n", gram ? "gram" : "standard", brief(error.what(), 200).c_str());
          stop_if_sticky(error, c.key() + (gram ? " [cublaslt gram NS baseline]" : " [cublaslt NS baseline]"), report, r, out_dir);
        }
        if (gram) lt_measured[c.torch_key()] = row;
      }
      if (auto found = torch.find(c.torch_key()); found != torch.end()) row.torch_ms = found->second;
      row.status = row.best.empty() ? "failed: no orthojit variant ran" : "ok";
    } catch (const std::exception& error) {
      // The case itself (its buffers, the timer's flush buffer): the next case may still run.
      row.status = std::string("failed: ") + error.what();
      std::printf("  failed: %s\n", brief(error.what(), 200).c_str());
      stop_if_sticky(error, c.key(), report, r, out_dir);
    }
    if (row.best.empty()) ++without_result;
    write_outputs(out_dir, report);
  }
  std::printf("NVRTC compiles of the variants: %.1f s in all\n", compile_seconds);
  report.complete = true;
  write_outputs(out_dir, report);
  std::printf("%s", table_text(report).c_str());
  return without_result == 0 ? 0 : 1;
}
