// GPU correctness (ctest label `gpu`): every shipped program × strategy × precision (bf16, f16) ×
// shape × CUDA variant (generated with the default tiles, every tile configuration on one shape,
// the fused small-matrix kernel where eligible, the cuBLAS baseline for the standard strategy, the
// cuBLASLt baseline for both strategies: standard NS and Gram NS as cublasLtMatmul calls)
// against the float64 reference interpreter, on fresh random inputs, with the output poisoned
// (all bits set: NaN) before each run so a kernel that skips an element cannot pass. Then the
// sm_90a product tile alone (cuda_device_hopper_products.h) and whole Muon steps, the update
// fused and on its own pass (cuda_device_muon_steps.h).
//
// Judged by the autotuner's measure (autotune/error_measure.h, compiled into this program): the
// largest error in every 16x16 tile of every matrix of the batch relative to the reference tile's
// RMS, and the relative Frobenius distance of every matrix, within error_bounds() of the case's
// storage type, strategy, steps and long side (the argument and the values measured on correct
// outputs are in autotune/error_measure.cpp). The reference rounds every stored value to the
// storage type exactly as the kernels do and differs from them only in accumulation order (f64
// exact vs f32 tensor-core sums) and the rounding flips that order causes, which stay a few
// storage units per element; one wrong tile or one wrong matrix of a batch is an error of the
// order of the values themselves, which a Frobenius bound over the whole batch would average away.
//
// Standalone (no GoogleTest) so it also builds on the GPU machines scripts/gpu-check runs on.
// Without a usable device it prints why and exits 77, which ctest reports as skipped.
// Usage: cuda_device_test [--filter TEXT]... [--json FILE] [--host-only sm_XX] [--case-timeout SECONDS] [--seed N] [--skip CASE]...
//   ($ORTHOJIT_GPU_TEST_JSON: default --json). --filter (repeatable): the cases whose names contain
//   one of the texts. --one-sm: work sized for one SM (ORTHOJIT_CUDA_SM_COUNT=1), so that every
//   persistent CTA (triangular mma.sync products, the sm_90a tile, its split-K partials) takes
//   several work items in turn, carrying its pipeline's barrier phases from one into the next (on
//   132 SMs the shapes here give each CTA one item); without --filter, on kOneSmFilters' cases. --host-only runs only what needs no GPU: every
//   case's schedule, eligibility, generated source and NVRTC compile for sm_XX (a dry run of
//   scripts/gpu-check's correctness phase on a machine without a device). --case-timeout: the
//   watchdog's limit on one case (default 120 s; 0: no watchdog). --seed: the inputs of an earlier
//   run (its "seed base" line; with the same --filter), the sm_90a tile's cases included. --skip
//   (repeatable): the cases whose names contain the text are not applicable, so that a run after a
//   HUNG or STICKY stop checks the others (scripts/gpu-check does so once).
//
// Lines: "RUN <case>" before each case and each compile step run alone (flushed: a run killed
// while a kernel hangs names it), "RUN host phase ..." before the parallel host phase; per case
// "PASS <case> ..." or "FAIL <case> ..." ("READY"/"FAIL" for the compile steps of --host-only);
// then the totals, "N passed, M failed, K not applicable ..." (--host-only: "N cases ready ...").
// A hung case: "HUNG <case> after N s"; a case whose failure poisoned the CUDA context (an illegal
// address, a launch failure, ...: every later call in the process would fail with the same
// error): its FAIL line, then "STICKY <case>: <error>". The JSON is rewritten after every case,
// "finished": false until the end, "running" the case in flight (tests/cuda_device_case_log.h).
// Exit codes: 0 every case passed; 1 a case failed; 2 a usage error; 3 a case hung (the watchdog
// stopped the run, the cases after it not run); 4 a failure poisoned the CUDA context (the run
// stopped after that case); 77 no usable device.
//
// ORTHOJIT_CUDA_SM90A=off (cuda/sm90a_switch.h) skips every case on the sm_90a tile, saying why:
// scripts/gpu-check's rerun of the other kernels after the tile hung or faulted.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "autotune/error_measure.h"
#include "bench/json_text.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_driver.h"
#include "cuda/fused_small_codegen.h"
#include "cuda/sm90a_switch.h"
#include "cuda/sm_count_override.h"
#include "cuda/sticky_error.h"
#include "cuda_device_case_log.h"
#include "cuda_device_hopper_products.h"
#include "cuda_device_muon_steps.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"
#include "reference/random_matrix.h"

namespace {

using namespace orthojit;

struct Shape {
  int64_t rows, cols, batch;
};

struct Case {
  std::string program;
  ir::StrategyKind strategy;
  ScalarType precision;
  Shape shape;
  cuda::CudaVariant variant;
  std::string name() const {
    return program + " " + ir::to_string(strategy) + " " + std::string(to_string(precision)) + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
           "x" + std::to_string(shape.batch) + " [" + variant.label() + "]";
  }
};

struct Outcome {
  bool ok = false, skipped = false;
  autotune::ErrorMeasure measure;
  autotune::ErrorBounds bounds;
  std::string message;
};

// --one-sm's cases: one program's default and per-product variants, standard and Gram, on a wide
// shape (triangular products of several upper tiles, the sm_90a tile), a batch (items spanning
// matrices) and the batched wide one (the 128x256 tile, split-K partials over matrices x splits);
// and the whole Muon steps (the update fused into the last product).
constexpr const char* kOneSmFilters[] = {"jordan_ns5 standard bf16 256x1024x1 ", "jordan_ns5 gram bf16 256x1024x1 ", "jordan_ns5 standard bf16 96x320x3 ",
                                         "jordan_ns5 gram bf16 96x320x3 ", "jordan_ns5 standard bf16 512x2048x2 ", "muon step "};

ir::Function schedule(const dsl::Program& program, const Case& c) {
  passes::CompileOptions options;
  options.rows = c.shape.rows;
  options.cols = c.shape.cols;
  options.batch = c.shape.batch;
  options.strategy = c.strategy;
  options.precision = c.precision;
  return passes::compile_program(program, options);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> filters;  // --filter: the cases whose names contain one of them
  std::string json_path, host_only;
  double case_timeout = 120;
  std::optional<uint64_t> seed;  // --seed: the inputs of an earlier run (its "seed base" line)
  std::vector<std::string> skips;  // --skip: cases an earlier run hung or faulted in (names containing the text)
  bool one_sm = false;             // --one-sm: work sized for one SM
  if (const char* path = std::getenv("ORTHOJIT_GPU_TEST_JSON"); path && *path) json_path = path;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    char* end = nullptr;
    if (argument == "--filter" && i + 1 < argc) filters.push_back(argv[++i]);
    else if (argument == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (argument == "--host-only" && i + 1 < argc) host_only = argv[++i];
    else if (argument == "--case-timeout" && i + 1 < argc && (case_timeout = std::strtod(argv[i + 1], &end), *end == '\0' && end != argv[i + 1] && case_timeout >= 0)) ++i;
    else if (argument == "--seed" && i + 1 < argc && (seed = std::strtoull(argv[i + 1], &end, 10), *end == '\0' && end != argv[i + 1])) ++i;
    else if (argument == "--skip" && i + 1 < argc && *argv[i + 1]) skips.push_back(argv[++i]);
    else if (argument == "--one-sm") one_sm = true;
    else {
      std::fprintf(stderr, "usage: cuda_device_test [--filter TEXT]... [--json FILE] [--host-only sm_XX] [--case-timeout SECONDS (0: none)] [--seed N] [--skip CASE]... [--one-sm]\n");
      return 2;
    }
  }
  if (one_sm) {
    ::setenv("ORTHOJIT_CUDA_SM_COUNT", "1", 1);  // before the device is opened: its info says 1
    if (filters.empty()) filters.assign(std::begin(kOneSmFilters), std::end(kOneSmFilters));
  }
  std::string reason;
  int shared_limit = 0;
  std::string target;
  if (!host_only.empty()) {
    int sm = 0;
    if (std::sscanf(host_only.c_str(), "sm_%d", &sm) != 1 || sm < 80) {
      std::fprintf(stderr, "--host-only takes a target sm_80 or newer, e.g. sm_90\n");
      return 2;
    }
    shared_limit = sm >= 90 ? 227 * 1024 : 163 * 1024;  // the opt-in shared memory of an H100/H200 or an A100
    target = host_only;
    std::printf("host-only dry run for %s\n", target.c_str());
  } else {
    if (!cuda::driver(&reason)) {
      std::printf("SKIP: %s\n", reason.c_str());
      return 77;
    }
    try {
      cuda::Device::get();
    } catch (const std::exception& error) {
      // A malformed ORTHOJIT_CUDA_SM_COUNT is a usage error, not a missing device.
      if (std::string(error.what()).find("ORTHOJIT_CUDA_SM_COUNT") != std::string::npos) {
        std::fprintf(stderr, "%s\n", error.what());
        return 2;
      }
      std::printf("SKIP: %s\n", error.what());
      return 77;
    }
    shared_limit = cuda::Device::get().info().max_shared_per_block_optin;
    target = cuda::Device::get().compile_target();
    std::printf("device: %s\n", cuda::Device::get().info().describe().c_str());
  }
  if (const std::string off = cuda::sm90a_disabled_reason(); !off.empty()) std::printf("sm_90a tile: off (%s)\n", off.c_str());
  // The multiprocessors the kernels are generated for: the device's (ORTHOJIT_CUDA_SM_COUNT may
  // reduce it: cuda/sm_count_override.h), or on a dry run an H100/H200's 132 (or the variable's
  // value), so that the dry run compiles the programs the device run will look up.
  int multiprocessors = 132;
  try {
    multiprocessors = host_only.empty() ? std::max(1, cuda::Device::get().info().multiprocessors) : cuda::multiprocessors_to_use(132);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 2;
  }
  if (multiprocessors != (host_only.empty() ? cuda::Device::get().info().device_multiprocessors : 132))
    std::printf("work sized for %d SMs (ORTHOJIT_CUDA_SM_COUNT): each persistent CTA takes several work items\n", multiprocessors);
  std::string joined_filters;
  for (const std::string& f : filters) joined_filters += (joined_filters.empty() ? "" : " | ") + f;
  // From here a hung case ends the run (exit 3) and every case's result is in the JSON at once.
  device_test::CaseLog log(json_path, case_timeout);
  log.set_header("\"device\": " + bench::json_string(host_only.empty() ? cuda::Device::get().info().describe() : "none (host-only dry run)") +
                 ", \"mode\": " + bench::json_string(host_only.empty() ? "device" : "host-only") + ", \"target\": " + bench::json_string(target) +
                 ", \"filter\": " + bench::json_string(joined_filters) + ", \"sm90a_off\": " + bench::json_string(cuda::sm90a_disabled_reason()) +
                 ", \"case_timeout_s\": " + device_test::json_number(case_timeout));

  // The matrix of cases. Shapes: a batch of small ones (the fused kernel's domain), a wide one,
  // a tall ragged one (orientation, edge guards), a square one.
  const std::vector<Shape> shapes = {{96, 320, 3}, {256, 1024, 1}, {300, 200, 2}, {192, 192, 1}};
  std::vector<Case> cases;
  for (const auto& shipped : kernels::shipped_programs()) {
    for (ir::StrategyKind strategy : {ir::StrategyKind::Standard, ir::StrategyKind::Gram})
      for (ScalarType precision : {ScalarType::BF16, ScalarType::F16})
        for (const Shape& shape : shapes) {
          for (auto kind : {cuda::CudaVariant::Kind::Generated, cuda::CudaVariant::Kind::FusedSmall, cuda::CudaVariant::Kind::Cublas,
                            cuda::CudaVariant::Kind::Cublaslt}) {
            cuda::CudaVariant variant;
            variant.kind = kind;
            cases.push_back({std::string(shipped.name), strategy, precision, shape, variant});
          }
        }
  }
  // Every tile configuration, on one wide and one ragged shape.
  for (const cuda::TileConfig& tile : cuda::tile_configs())
    for (const Shape& shape : {Shape{256, 1024, 1}, Shape{300, 200, 2}})
      for (ir::StrategyKind strategy : {ir::StrategyKind::Standard, ir::StrategyKind::Gram}) {
        cuda::CudaVariant variant;
        variant.tile = tile;
        cases.push_back({"polar_express5", strategy, ScalarType::BF16, shape, variant});
      }
  // The products on the sm_90a tile (generated hopper): every shipped program in bf16 on shapes
  // whose products all qualify (16-byte aligned rows) or partly (200 columns: some do not), on a
  // CC 9.0 device (elsewhere skipped with the reason).
  for (const auto& shipped : kernels::shipped_programs())
    for (ir::StrategyKind strategy : {ir::StrategyKind::Standard, ir::StrategyKind::Gram})
      for (const Shape& shape : {Shape{256, 1024, 1}, Shape{192, 192, 1}, Shape{136, 200, 1}, Shape{512, 2048, 1}}) {
        cuda::CudaVariant variant;
        variant.hopper = true;
        cases.push_back({std::string(shipped.name), strategy, ScalarType::BF16, shape, variant});
      }
  // The 128x256 tile on the dense products of standard steps (B·X: the third product of each of
  // jordan_ns5's 5 steps), the triangular ones on the 128x128 tile, at shapes where B·X is one
  // and several tiles wide.
  std::string wide_steps = "generated per-product ";
  for (int step = 0; step < 5; ++step) wide_steps += std::string(step ? "," : "") + "sm90a,sm90a,sm90a/n256";
  for (const Shape& shape : {Shape{256, 1024, 1}, Shape{136, 200, 1}, Shape{512, 2048, 2}})
    cases.push_back({"jordan_ns5", ir::StrategyKind::Standard, ScalarType::BF16, shape, cuda::CudaVariant::parse(wide_steps)});
  // Split-K on the sm_90a tile (the partials into f32, then the split-K combine): X·Xᵀ of every
  // step in 2 and 4 splits, where each split holds several K tiles of 64, batched too (the
  // partial kernel's items span matrices x splits x upper tiles). The tuner offers splits only
  // where the unsplit product leaves SMs idle, which none of the shapes above does.
  for (int splits : {2, 4}) {
    std::string split_steps = "generated per-product ";
    for (int step = 0; step < 5; ++step) split_steps += std::string(step ? "," : "") + "sm90a/k" + std::to_string(splits) + ",-,-";
    for (const Shape& shape : {Shape{256, 1024, 1}, Shape{512, 2048, 2}})
      cases.push_back({"jordan_ns5", ir::StrategyKind::Standard, ScalarType::BF16, shape, cuda::CudaVariant::parse(split_steps)});
  }
  const int target_sm = std::atoi(target.c_str() + target.find('_') + 1);
  cases.erase(std::remove_if(cases.begin(), cases.end(), [&](const Case& c) { return !device_test::passes_filters(c.name(), filters); }), cases.end());

  // Schedules, eligibility, and the reference per distinct (program, strategy, precision, shape)
  // computed in parallel on the host; the generated programs compiled in parallel (NVRTC is
  // thread-safe) into the process cache, so the device phase below only loads and runs.
  const auto start = std::chrono::steady_clock::now();
  std::vector<Outcome> outcomes(cases.size());
  std::vector<ir::Function> functions(cases.size());
  std::vector<dsl::Program> programs(cases.size());
  // One input and one reference per distinct (program, strategy, precision, shape): the variants
  // of a problem are checked on the same data, and the f64 reference is computed once.
  std::map<std::string, size_t> problem_of_key;
  std::vector<size_t> problem(cases.size());
  for (size_t index = 0; index < cases.size(); ++index) {
    const Case& c = cases[index];
    const std::string key = c.program + " " + ir::to_string(c.strategy) + " " + std::string(to_string(c.precision)) + " " + std::to_string(c.shape.rows) + "x" +
                            std::to_string(c.shape.cols) + "x" + std::to_string(c.shape.batch);
    problem[index] = problem_of_key.emplace(key, problem_of_key.size()).first->second;
  }
  std::vector<std::vector<double>> problem_inputs(problem_of_key.size()), problem_references(problem_of_key.size());
  std::vector<std::once_flag> problem_ready(problem_of_key.size());
  const uint64_t seed_base = seed ? *seed : static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  std::printf("seed base %llu (%s; --seed %llu with the same --filter gives this run's inputs again)\n", static_cast<unsigned long long>(seed_base),
              seed ? "from --seed" : "fresh inputs each run", static_cast<unsigned long long>(seed_base));
  const auto& headers = kernels::cuda_device_headers();
  std::atomic<size_t> next{0}, host_done{0}, compiled_programs{0}, disk_programs{0}, memory_programs{0};
  std::mutex print_mutex;
  auto host_work = [&] {
    for (size_t index = next++; index < cases.size(); index = next++) {
      const Case& c = cases[index];
      try {
        programs[index] = kernels::load_program_by_name_or_path(c.program);
        functions[index] = schedule(programs[index], c);
        std::string why = cuda::variant_unavailable_reason(functions[index], c.variant, shared_limit);
        if (why.empty() && c.variant.needs_sm90a() && target_sm != 90) why = "the sm_90a tile runs on compute capability 9.0 only (target " + target + ")";
        for (const std::string& skip : skips)
          if (why.empty() && c.name().find(skip) != std::string::npos) why = "--skip '" + skip + "': an earlier run hung or faulted there";
        // Gram on a square matrix in 16-bit storage is outside the error bounds even when every
        // kernel is right (autotune/error_measure.cpp: the CPU engines and the emulated kernels
        // measure 1.0 to 6 against the bf16 tile bound 0.5 on 192x192, deepseek_v4's reference
        // overflows), so a correct device would fail it; the square shape checks the standard
        // strategy, gram runs on the others.
        if (why.empty() && c.strategy == ir::StrategyKind::Gram && c.shape.rows == c.shape.cols)
          why = "gram on a square matrix: ill-conditioned in 16-bit storage, outside the error bounds for correct kernels too";
        if (!why.empty()) {
          outcomes[index].skipped = true;
          outcomes[index].message = why;
          continue;
        }
        // A fresh input per case: the seed mixes the run's time with the case index.
        const size_t p = problem[index];
        if (host_only.empty()) std::call_once(problem_ready[p], [&] {
          problem_inputs[p] = reference::gaussian_values(c.shape.rows * c.shape.cols * c.shape.batch, seed_base + p * 7919);
          problem_references[p] = reference::interpret(functions[index], problem_inputs[p]);
        });
        if (c.variant.kind != cuda::CudaVariant::Kind::Cublas && c.variant.kind != cuda::CudaVariant::Kind::Cublaslt) {
          const cuda::CudaProgram generated = cuda::generate_variant(functions[index], c.variant, shared_limit, multiprocessors);
          const auto result = cuda::ProgramCache::process_default().get_or_compile(generated.source, headers, generated.compile_target(target));
          ++(result.source == cuda::ProgramCache::Result::Source::Compiled ? compiled_programs
             : result.source == cuda::ProgramCache::Result::Source::Disk ? disk_programs : memory_programs);
        }
      } catch (const std::exception& error) {
        outcomes[index].message = std::string("host phase: ") + error.what();
      }
      // Progress: on a cold cache this phase is minutes of NVRTC (scripts/gpu-kit packs a warm one).
      if (const size_t finished = ++host_done; finished % 50 == 0 || finished == cases.size()) {
        std::lock_guard<std::mutex> lock(print_mutex);
        std::printf("  host phase: %zu/%zu cases, programs compiled %zu, from the disk cache %zu, already loaded %zu (%.0f s)\n", finished, cases.size(),
                    compiled_programs.load(), disk_programs.load(), memory_programs.load(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        std::fflush(stdout);
      }
    }
  };
  std::vector<std::thread> workers;
  const unsigned thread_count = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  // Not a case: the watchdog does not time it (its length is the number of cases over the threads).
  log.announce("host phase: schedules, references and NVRTC for " + std::to_string(cases.size()) + " cases on " + std::to_string(thread_count) + " threads");
  for (unsigned t = 0; t < thread_count; ++t) workers.emplace_back(host_work);
  for (auto& worker : workers) worker.join();
  std::printf("host phase (schedules, references, NVRTC) for %zu cases: %.1f s on %u threads\n", cases.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), thread_count);

  {
    int switched_off = 0;
    for (size_t index = 0; index < cases.size(); ++index) switched_off += outcomes[index].skipped && !cuda::variant_switched_off_reason(cases[index].variant).empty();
    if (switched_off > 0) std::printf("%d cases on the sm_90a tile skipped: it is turned off by %s\n", switched_off, cuda::sm90a_disabled_reason().c_str());
  }
  int not_applicable = 0;
  for (const Outcome& outcome : outcomes) not_applicable += outcome.skipped;
  log.set_not_applicable(not_applicable);

  if (!host_only.empty()) {
    int compiled = 0, failures = 0;
    for (size_t index = 0; index < cases.size(); ++index) {
      if (outcomes[index].skipped) continue;
      const bool ready = outcomes[index].message.empty();
      if (!ready) {
        ++failures;
        std::printf("FAIL %s: %s\n", cases[index].name().c_str(), outcomes[index].message.c_str());
      } else ++compiled;
      log.add({cases[index].name(), ready, outcomes[index].message, ""});
    }
    std::printf("%d cases ready (generated and compiled for %s, or cuBLAS/cuBLASLt), %d not applicable, %d failed\n", compiled, target.c_str(), not_applicable, failures);
    if (target == "sm_90" || target == "sm_90a") {
      std::string skipped;
      for (const auto& hopper : device_test::check_hopper_products(90, true, headers, skipped, log)) failures += !hopper.ok;
      if (!skipped.empty()) std::printf("hopper product tile not compiled: %s\n", skipped.c_str());
    }
    std::string skipped;
    for (const auto& step : device_test::check_muon_steps(90, true, target, headers, filters, skipped, log)) failures += !step.ok;
    if (!skipped.empty()) std::printf("muon step on the sm_90a tile not compiled: %s\n", skipped.c_str());
    log.complete();
    return failures == 0 ? 0 : 1;
  }
  const cuda::DeviceInfo& device = cuda::Device::get().info();
  for (size_t index = 0; index < cases.size(); ++index) {
    const Case& c = cases[index];
    Outcome& outcome = outcomes[index];
    if (outcome.skipped) continue;
    const std::string name = c.name();
    std::string sticky;  // the context's sticky error after a failure (cuda/sticky_error.h)
    if (outcome.message.empty()) {
      log.begin(name);
      bool threw = false;
      try {
        auto runner = cuda::build_cuda_runner(programs[index], functions[index], c.variant, headers);
        const int64_t elements = c.shape.rows * c.shape.cols * c.shape.batch;
        cuda::DeviceBuffer input(elements * 4), output(elements * 4);
        std::vector<float> host_input(problem_inputs[problem[index]].begin(), problem_inputs[problem[index]].end()), host_output(static_cast<size_t>(elements));
        input.upload(host_input.data(), elements * 4);
        const auto& api = cuda::Device::get().api();
        cuda::check(api.cuMemsetD8Async(output.get(), 0xff, static_cast<size_t>(elements * 4), nullptr), "poisoning the output");
        runner->run_device(input.get(), output.get(), nullptr);
        cuda::check(api.cuCtxSynchronize(), "running " + name);
        output.download(host_output.data(), elements * 4);
        outcome.bounds = autotune::error_bounds(functions[index]);
        outcome.measure = autotune::measure_error(host_output.data(), problem_references[problem[index]].data(), c.shape.rows, c.shape.cols, c.shape.batch);
        outcome.ok = autotune::within(outcome.measure, outcome.bounds);
        if (!outcome.measure.finite) outcome.message = "non-finite output (an element was not written, or overflowed)";
        else if (!outcome.ok) outcome.message = autotune::describe_violation(outcome.measure, outcome.bounds, c.shape.rows, c.shape.cols);
      } catch (const std::exception& error) {
        outcome.message = error.what();
        sticky = cuda::sticky_error_after(error);
        threw = true;
      }
      // A fault reported by no call of the case (the context's error is there all the same).
      if (!outcome.ok && !threw) sticky = cuda::poisoned_context_reason();
    }
    std::printf("%s %-70s tile %.2e (tol %.2e) rel %.2e (tol %.0e)%s%s\n", outcome.ok ? "PASS" : "FAIL", name.c_str(), outcome.measure.tile, outcome.bounds.tile,
                outcome.measure.frobenius, outcome.bounds.frobenius, outcome.message.empty() ? "" : ": ", outcome.message.c_str());
    log.finish({name, outcome.ok, outcome.message,
                ", \"tile_error\": " + device_test::json_number(outcome.measure.tile) + ", \"tile_tolerance\": " + device_test::json_number(outcome.bounds.tile) +
                    ", \"relative_error\": " + device_test::json_number(outcome.measure.frobenius) + ", \"tolerance\": " + device_test::json_number(outcome.bounds.frobenius)});
    log.stop_if_sticky(name, sticky);
  }
  // The sm_90a product tile alone, on the shapes of the large products (the programs above run it
  // as the generated hopper variant).
  std::string hopper_skipped;
  device_test::check_hopper_products(device.sm, false, headers, hopper_skipped, log, seed_base);
  if (!hopper_skipped.empty()) std::printf("hopper product tile not run: %s\n", hopper_skipped.c_str());
  // Whole Muon steps, the update fused into the last product and on its own pass.
  std::string steps_skipped;
  device_test::check_muon_steps(device.sm, false, target, headers, filters, steps_skipped, log);
  if (!steps_skipped.empty()) std::printf("muon step on the sm_90a tile not run: %s\n", steps_skipped.c_str());
  const int passed = log.passed(), failed = log.failed();
  std::printf("\n%d passed, %d failed, %d not applicable (e.g. fused-small above 128 rows, cublas with gram), %.1f s\n", passed, failed, not_applicable,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  log.complete();
  return failed == 0 ? 0 : 1;
}
