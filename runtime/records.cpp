// The structured results of info, tune, bench and plan (runtime/records.h).
#include "runtime/records.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <tuple>

#include "autotune/record_lookup.h"
#include "autotune/timing_harness.h"
#include "autotune/tuner.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "autotune/cuda_tuner.h"
#include "cuda/cuda_driver.h"
#include "cuda/sm90a_switch.h"
#endif
#include "cpu/build_status.h"
#include "cpu/amx_self_check.h"
#include "cpu/bf16_engine.h"
#include "cpu/cpu_isa.h"
#include "cpu/vendor_gemm.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/random_matrix.h"
#include "runtime/build_parts.h"
#include "support/cpu_peak.h"
#include "support/host_cpu.h"

namespace orthojit::runtime {

namespace {

double shape_cost(const autotune::UniqueShape& shape) {
  const double m = static_cast<double>(shape.rows), n = static_cast<double>(shape.cols);
  return (20 * m * m * n + 10 * m * m * m) * static_cast<double>(shape.batch);
}

std::string shape_text(int64_t rows, int64_t cols, int64_t batch) {
  return std::to_string(rows) + "x" + std::to_string(cols) + (batch > 1 ? "x" + std::to_string(batch) : "");
}

double percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const double position = fraction * static_cast<double>(values.size() - 1);
  const size_t low = static_cast<size_t>(position);
  const size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (values[high] - values[low]) * (position - static_cast<double>(low));
}

double dense_flops(const ir::Function& standard) {
  double flops = 0;
  for (const auto& node : standard.nodes)
    if (node.kind == ir::OpKind::Gemm)
      flops += 2.0 * static_cast<double>(node.shape.rows.size) * static_cast<double>(node.shape.cols.size) *
               static_cast<double>(standard.node(node.operands[0]).shape.cols.size);
  return flops * static_cast<double>(standard.batch);
}

}  // namespace

// ---- info ---------------------------------------------------------------------------------

std::string cache_directory() {
  if (const char* dir = std::getenv("ORTHOJIT_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/orthojit";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/orthojit";
  return "(none: set ORTHOJIT_CACHE_DIR)";
}

nlohmann::json info_record() {
  const HostCpu& cpu = host_cpu();
  nlohmann::json cuda = {{"available", false}};
  if (const std::string why = runtime::cuda_backend_unavailable_reason(); !why.empty()) {
    cuda["reason"] = why;
  } else {
    cuda["available"] = true;
#ifdef ORTHOJIT_HAVE_CUDA
    cuda["device"] = cuda::Device::get().info().describe();
#endif
  }
#ifdef ORTHOJIT_HAVE_CUDA
  if (const std::string off = cuda::sm90a_disabled_reason(); !off.empty()) cuda["sm90a_off"] = off;
#endif
  nlohmann::json paths = nlohmann::json::array();
  for (cpu::CpuIsa isa : cpu::supported_isas()) paths.push_back(std::string(cpu::to_string(isa)));
  nlohmann::json programs = nlohmann::json::array();
  for (const auto& shipped : kernels::shipped_programs()) {
    const dsl::Program program = kernels::load_program_by_name_or_path(std::string(shipped.name));
    programs.push_back({{"name", program.name},
                        {"storage", std::string(to_string(program.policy.storage))},
                        {"steps", program.steps.size()},
                        {"coefficients", program.coefficient_set.empty() ? "custom" : program.coefficient_set},
                        {"safety", program.coefficient_safety}});
  }
  nlohmann::json parts = nlohmann::json::array();
  for (const runtime::BuildPart& part : runtime::build_parts()) parts.push_back({{"name", part.name}, {"built", part.built}, {"detail", part.detail}});
  return {{"version", ORTHOJIT_VERSION},
          {"backends", runtime::available_backends()},
          {"parts", parts},
          {"cuda", cuda},
          {"host_cpu", {{"model", cpu.model}, {"logical_cores", cpu.logical_cores}, {"avx2", cpu.avx2}, {"fma", cpu.fma}, {"f16c", cpu.f16c},
                        {"avx512f", cpu.avx512f}, {"avx512bf16", cpu.avx512bf16}, {"best_isa", cpu.best_isa()}}},
          {"cpu_paths", paths},
          {"cpu_default_path", std::string(cpu::to_string(cpu::best_host_isa()))},
          {"bf16_kernel", {{"default", std::string(cpu::to_string(cpu::default_bf16_engine(cpu::best_host_isa())))},
                           {"vdpbf16ps_over_f32_fma", cpu::bf16_dot_rates().ratio()},
                           {"reason", cpu::describe_default_bf16_engine()}}},
          {"amx", {{"amx_tile", cpu.amx_tile}, {"amx_bf16", cpu.amx_bf16}, {"amx_fp16", cpu.amx_fp16}, {"xcr0_tile_state", cpu.xcr0_tile_state},
                   {"usable", cpu::host_supports(cpu::CpuIsa::AmxBf16)}, {"reason", cpu::host_supports(cpu::CpuIsa::AmxBf16) ? amx_availability().reason
                                                                                                                        : cpu::unsupported_reason(cpu::CpuIsa::AmxBf16)},
                   {"self_check", {{"ran", cpu::amx_self_check().ran}, {"bf16_passed", cpu::amx_self_check().bf16_passed},
                                   {"fp16_passed", cpu::amx_self_check().fp16_passed}, {"detail", cpu::amx_self_check().detail}}},
                   {"fp16_usable", cpu::amx_fp16_usable()}}},
          {"cache_dir", cache_directory()},
          {"tuning", autotune::describe_tuning_records()},
          {"programs", programs}};
}

// ---- tune ----------------------------------------------------------------------------------

autotune::UniqueShape single_tuning_shape(const ParsedShape& shape) {
  return {std::min(shape.rows, shape.cols), std::max(shape.rows, shape.cols), shape.batch, 1, {"--shape"}};
}

TuneTarget prepare_tuning(const TuneRequest& request) {
  const bool cuda = request.backend == autotune::TuneBackend::Cuda;
  if (!cuda && !cpu::cpu_backend_unavailable_reason().empty())
    throw runtime::UsageError("backend cpu: " + cpu::cpu_backend_unavailable_reason() + " (backend cuda tunes the GPU's kernels)");
#ifdef ORTHOJIT_HAVE_CUDA
  if (cuda) {
    if (const std::string why = runtime::cuda_backend_unavailable_reason(); !why.empty()) throw runtime::UsageError("--backend cuda: " + why);
  }
  const autotune::DeviceFingerprint fingerprint = cuda ? autotune::cuda_fingerprint() : autotune::cpu_fingerprint();
  if (cuda) {
    const ScalarType storage = passes::effective_policy(request.program->policy, request.precision).storage;
    if (storage != ScalarType::BF16 && storage != ScalarType::F16)
      throw runtime::UsageError("--backend cuda tunes bf16 or f16 storage; " + request.program->name + " stores " + std::string(to_string(storage)) +
                                ": add --precision bf16 (or f16)");
  }
#else
  if (cuda) throw runtime::UsageError("--backend cuda: " + runtime::cuda_backend_unavailable_reason());
  const autotune::DeviceFingerprint fingerprint = autotune::cpu_fingerprint();
#endif
  TuneTarget target{fingerprint, request.out.value_or(autotune::default_tuning_path(fingerprint)), {}};
  // Before any timing: a records file that cannot be written, or that a newer orthojit wrote,
  // would otherwise be found only when the first shape's results are merged.
  if (const std::string why = autotune::tuning_path_unwritable_reason(target.path); !why.empty())
    throw runtime::FileError("cannot write the tuning records " + target.path + ": " + why + "; choose another file with --out (or ORTHOJIT_CACHE_DIR)");
  target.existing = autotune::load_tuning_file(target.path);
  if (target.existing.newer_schema)
    throw runtime::UsageError(target.path + " holds tuning records of a newer orthojit (schema version " + std::to_string(*target.existing.newer_schema) +
                              "), which tuning here would overwrite; choose another file with --out");
  if (target.existing.file) {
    if (auto reason = fingerprint.mismatch(target.existing.file->fingerprint))
      throw runtime::UsageError(target.path + " holds tuning records of another device (" + *reason + "); choose another file with --out");
  }
  return target;
}

TuneOutcome run_tuning(const TuneRequest& request, const TuneTarget& target, bool report) {
  const dsl::Program& program = *request.program;
  const auto& shapes = request.shapes;
  const auto& existing = target.existing;
  const bool interactive = report && ::isatty(::fileno(stderr)) != 0;
  const bool log_lines = report && [] {
    const char* text = std::getenv("ORTHOJIT_TUNE_LOG");
    return text && std::string(text) == "1";
  }();
  const auto started = std::chrono::steady_clock::now();
  TuneOutcome outcome;
  // The restarts every shape is tuned with. The search depends on the program's polynomials and
  // the storage type only, so it runs once (milliseconds).
  std::optional<std::vector<int>> restarts;
  std::string restarts_source = "program";
  nlohmann::json restart_search;
  const int step_count = static_cast<int>(program.steps.size());
  if (request.restarts.mode == autotune::RestartRequest::Mode::Auto) {
    const ScalarType storage = passes::effective_policy(program.policy, request.precision).storage;
    const autotune::RestartChoice choice =
        autotune::search_gram_restarts(autotune::program_step_polynomials(program, request.precision), storage, program.gram_restarts);
    restarts = choice.positions;
    restarts_source = "auto";
    restart_search = choice.to_json();
  } else if (request.restarts.mode == autotune::RestartRequest::Mode::Explicit) {
    restarts = autotune::checked_restart_positions(request.restarts.positions, step_count);
    restarts_source = "explicit";
  }
  outcome.restarts = {{"restarts", restarts.value_or(program.gram_restarts)}, {"source", restarts_source}};
  if (!restart_search.is_null()) outcome.restarts["search"] = restart_search;
  // The restarts an entry was tuned with (the program's when it names none; an unreadable field
  // counts as different, so the shape is tuned again).
  auto entry_restarts = [&](const nlohmann::json& entry) -> std::optional<std::vector<int>> {
    try {
      return autotune::recorded_restarts(entry, step_count).value_or(program.gram_restarts);
    } catch (const std::invalid_argument&) {
      return std::nullopt;
    }
  };
  for (size_t index = 0; index < shapes.size(); ++index) {
    const auto& shape = shapes[index];
    const autotune::ProblemKey key = autotune::problem_key(program, shape.rows, shape.cols, shape.batch, request.precision);
    nlohmann::json entry;
    bool cached = false;
    if (existing.file && existing.file->entries.contains(key.key) && !request.retune &&
        (!restarts || entry_restarts(existing.file->entries.at(key.key)) == restarts)) {
      entry = existing.file->entries.at(key.key);
      cached = true;
    } else {
      autotune::TuneProblem problem;
      problem.program = &program;
      problem.program_name = program.name;
      problem.rows = shape.rows;
      problem.cols = shape.cols;
      problem.batch = shape.batch;
      problem.precision = request.precision;
      problem.gram_restarts = restarts;
      if (restarts) problem.gram_restarts_source = restarts_source;
      problem.restart_search = restart_search;
      autotune::TuneSettings settings;
      settings.threads = request.threads;
      settings.proxy_timing = request.proxy_timing;
      // Every shape gets a floor of a quarter of an even split (cheap shapes are cheap to tune and
      // would otherwise get only their default timed); the rest of what is left goes to this and
      // the later shapes in proportion to cost, so that what an earlier shape did not use (or a
      // cached one) goes to the later ones.
      const double budget = request.budget;
      const double floor = budget / (4.0 * static_cast<double>(shapes.size()));
      double remaining_cost = 0;
      for (size_t later = index; later < shapes.size(); ++later) remaining_cost += shape_cost(shapes[later]);
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const double shared = std::max(0.0, budget - spent - floor * static_cast<double>(shapes.size() - index));
      settings.budget_seconds = floor + shared * shape_cost(shape) / remaining_cost;
      const std::string label = "[" + std::to_string(index + 1) + "/" + std::to_string(shapes.size()) + "] " + shape_text(shape.rows, shape.cols, shape.batch);
      settings.progress = [&](const autotune::TuneProgress& progress) {
        if (request.on_progress) request.on_progress(index, shapes.size(), shape_text(shape.rows, shape.cols, shape.batch), progress);
        if (!interactive) {
          // A log (scripts/gpu-check's tuner phase sets ORTHOJIT_TUNE_LOG=1) gets a flushed line
          // per candidate and phase, so that a run killed while a kernel hangs names it.
          if (log_lines) std::fprintf(stderr, "RUN %s [%d/%d] %s %s\n", label.c_str(), progress.candidate, progress.candidates, progress.label.c_str(),
                                      progress.phase.c_str()), std::fflush(stderr);
          return;  // a progress bar only on a terminal; logs get one line per shape
        }
        const int width = 20, filled = progress.candidates ? width * (progress.candidate - 1) / progress.candidates : 0;
        std::fprintf(stderr, "\r%-24s [%s%s] %2d/%-2d %-6s %-36s", label.c_str(), std::string(static_cast<size_t>(filled), '#').c_str(),
                     std::string(static_cast<size_t>(width - filled), '.').c_str(), progress.candidate, progress.candidates, progress.phase.c_str(),
                     progress.label.c_str());
      };
#ifdef ORTHOJIT_HAVE_CUDA
      entry = request.backend == autotune::TuneBackend::Cuda ? autotune::tune_shape_cuda(problem, settings) : autotune::tune_shape(problem, settings);
#else
      entry = autotune::tune_shape(problem, settings);
#endif
      if (report) {
        if (interactive) std::fprintf(stderr, "\r%100s\r", "");
        std::fprintf(stderr, "%-24s tuned in %.1f s\n", label.c_str(), entry["bench"]["elapsed_s"].get<double>());
      }
      std::string warning;
      autotune::merge_into_tuning_file(target.path, target.fingerprint, {{key.key, entry}}, &warning);
      if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
      // A candidate left the device unusable (autotune/tuning_loop.h unusable_reason): this
      // shape's record is kept (what was checked before it), nothing later can run.
      if (entry.contains("bench") && entry["bench"].contains("stopped"))
        throw std::runtime_error("STICKY " + label + ": " + entry["bench"]["stopped"].get<std::string>() + "; the tune stops here (the records of " +
                                 std::to_string(index + 1) + " shape(s) are in " + target.path + ")");
    }
    if (request.on_progress) request.on_progress(index, shapes.size(), shape_text(shape.rows, shape.cols, shape.batch), {1, 1, "", cached ? "cached" : "done"});
    nlohmann::json row = {{"rows", shape.rows}, {"cols", shape.cols}, {"batch", shape.batch}, {"count", shape.count}, {"cached", cached}};
    if (auto tuned_with = entry_restarts(entry)) row["gram_restarts"] = *tuned_with;
    row["gram_restarts_source"] = entry.value("gram_restarts_source", std::string("program"));
    if (!entry["winner"].is_null()) {
      row["winner"] = entry["winner"]["label"];
      row["winner_ms"] = entry["winner"]["p50_ms"];
      if (entry["default"].contains("p50_ms")) row["speedup_over_default"] = entry["default"]["p50_ms"].get<double>() / entry["winner"]["p50_ms"].get<double>();
      if (entry.contains("vendor_p50_ms")) row["speedup_over_vendor"] = entry["vendor_p50_ms"].get<double>() / entry["winner"]["p50_ms"].get<double>();
      if (entry.contains("vendor_label")) row["vendor"] = entry["vendor_label"];
    }
    // How many candidates were judged (checked, and timed when correct), how many of them by the
    // proxy, and how many the budget left untimed. A record of an earlier version reads the same
    // (its statuses are the same strings; it has no proxy fields).
    int skipped = 0, judged = 0, by_proxy = 0, finalists = 0;
    for (const auto& candidate : entry["candidates"]) {
      const auto status = autotune::parse_trial_status(candidate.value("status", std::string()));
      skipped += status == autotune::TrialStatus::SkippedBudget ? 1 : 0;
      judged += status == autotune::TrialStatus::Ok || status == autotune::TrialStatus::WrongResult || status == autotune::TrialStatus::RunFailed ||
                        status == autotune::TrialStatus::CompileFailed
                    ? 1
                    : 0;
      by_proxy += candidate.contains("proxy") ? 1 : 0;
      finalists += candidate.value("finalist", false) ? 1 : 0;
    }
    row["skipped_for_budget"] = skipped;
    row["judged"] = judged;
    row["ranked_by_proxy"] = by_proxy;
    row["finalists"] = finalists;
    outcome.shapes.push_back(row);
    outcome.keys.push_back(key.key);
    outcome.entries.push_back(entry);
  }
  outcome.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return outcome;
}

// ---- bench ---------------------------------------------------------------------------------

nlohmann::json bench_record(const BenchRequest& request, bool report) {
  const dsl::Program& program = *request.program;
  const ParsedShape& shape = request.shape;
  const runtime::OrthogonalizeOptions& options = request.options;
  runtime::parse_strategy_option(options.strategy);
  if (request.repeat < 1) throw runtime::UsageError("--repeat must be at least 1");
  auto compiled = runtime::compile_orthogonalizer(program, shape.batch, shape.rows, shape.cols, options);
  passes::CompileOptions standard_options;
  standard_options.rows = shape.rows;
  standard_options.cols = shape.cols;
  standard_options.batch = shape.batch;
  standard_options.precision = options.precision;
  const double flops = dense_flops(passes::compile_program(program, standard_options));

  const int64_t count = shape.batch * shape.rows * shape.cols;
  const auto values = reference::gaussian_values(count, 1);
  std::vector<float> input(values.begin(), values.end()), output(static_cast<size_t>(count));
  if (report)
    std::fprintf(stderr, "orthojit bench: %s %lldx%lldx%lld on %s, %s; warm-up...\n", program.name.c_str(), static_cast<long long>(shape.rows),
                 static_cast<long long>(shape.cols), static_cast<long long>(shape.batch), compiled->describe_target().c_str(),
                 compiled->strategy_reason().c_str());
  compiled->run(input.data(), output.data());
  std::vector<double> seconds;
  for (int run = 0; run < request.repeat; ++run) {
    const auto start = std::chrono::steady_clock::now();
    compiled->run(input.data(), output.data());
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (report) std::fprintf(stderr, "\r  run %d/%d: %.2f ms   ", run + 1, request.repeat, seconds.back() * 1e3);
  }
  if (report) std::fprintf(stderr, "\n");
  const double median = percentile(seconds, 0.5), p20 = percentile(seconds, 0.2), p80 = percentile(seconds, 0.8);
  const double gflops = flops / median * 1e-9;

  const std::string& backend = compiled->backend();  // "auto" resolved
  const std::string isa = backend == "cpu" ? compiled->cpu_path() : "generic";
  const int threads = options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const PeakEstimate peak = estimate_peak(isa, backend == "cpu" ? threads : 1);
  // The ceiling of the engine the products ran on, each measured on this core: AMX tiles (the
  // TDPBF16PS rate), the vdpbf16ps kernel (its instruction's rate), else f32 FMAs (bf16/f16
  // operands widened while packing run on them too).
  // A vendor library's products are held to the best ceiling of their operands on this core
  // (oneDNN's bf16 matmul uses AMX or vdpbf16ps where they exist; OpenBLAS computes in f32).
  const std::string& ran_on = compiled->cpu_engine();
  const bool sixteen_bit = compiled->function().policy.storage != ScalarType::F32;
  const bool library_16 = ran_on == "onednn" && sixteen_bit;
  const bool on_amx = (ran_on == "amx" || library_16) && peak.amx_measured_flops_per_cycle > 0;
  const bool on_bf16_dot = !on_amx && (ran_on == "bf16dot" || library_16) && peak.bf16_measured_flops_per_cycle > 0;
  const std::string engine = backend != "cpu" ? backend : ran_on;
  const double peak_gflops = on_amx ? peak.amx_gflops() : on_bf16_dot ? peak.bf16_dot_gflops() : peak.f32_gflops();
  return {{"program", program.name},
          {"shape", {shape.rows, shape.cols, shape.batch}},
          {"backend", backend},
          {"target", compiled->describe_target()},
          {"strategy", ir::to_string(compiled->strategy())},
          {"storage", std::string(to_string(compiled->function().policy.storage))},
          {"median_s", median},
          {"p20_s", p20},
          {"p80_s", p80},
          {"repeat", request.repeat},
          {"jit_s", compiled->jit_seconds()},
          {"dense_equivalent_gflop", flops * 1e-9},
          {"gflops", gflops},
          {"engine", engine},
          {"peak_gflops", peak_gflops},
          {"fraction_of_peak", gflops / peak_gflops},
          {"peak", peak.describe()}};
}

// ---- bench --model / --compare ----------------------------------------------------------------

nlohmann::json compare_record(const CompareRequest& request, const std::function<void(const nlohmann::json&)>& on_row, bool progress) {
  const dsl::Program& program = *request.program;
  const bool interactive = progress && ::isatty(::fileno(stderr)) != 0;
  double total = 0;
  for (const auto& shape : request.shapes) total += static_cast<double>(shape.rows * shape.rows * shape.cols * shape.batch);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& shape : request.shapes) {
    autotune::TuneProblem problem;
    problem.program = &program;
    problem.rows = shape.rows;
    problem.cols = shape.cols;
    problem.batch = shape.batch;
    problem.precision = request.precision;
    const auto values = reference::gaussian_values(shape.rows * shape.cols * shape.batch, 5);
    std::vector<float> input(values.begin(), values.end()), output(input.size());
    // A quarter of the shape's share for each of the four engines, so that the whole run keeps to
    // --budget (a third each with a 0.5 s floor took 5.8 s of a 1 s budget on a small model); the
    // harness still times three repeats unless one run alone exceeds the share.
    autotune::TimingSettings timing;
    timing.budget_seconds = request.budget * static_cast<double>(shape.rows * shape.rows * shape.cols * shape.batch) / total / 4;
    nlohmann::json row = {{"rows", shape.rows}, {"cols", shape.cols}, {"batch", shape.batch}, {"count", shape.count},
                          {"label", shape_text(shape.rows, shape.cols, shape.batch)}};
    // The vendor libraries as the tuner offers them: OpenBLAS always, oneDNN for 16-bit storage
    // (its bf16 matmul); the faster of the two is the vendor column.
    const ScalarType storage = passes::effective_policy(program.policy, request.precision).storage;
    using cpu::ProductEngine;
    using ir::StrategyKind;
    for (const auto& [name, engine, strategy] : {std::tuple{"standard", ProductEngine::Jit, StrategyKind::Standard}, std::tuple{"gram", ProductEngine::Jit, StrategyKind::Gram},
                                                 std::tuple{"openblas", ProductEngine::OpenBlas, StrategyKind::Standard},
                                                 std::tuple{"onednn", ProductEngine::OneDnn, StrategyKind::Standard}}) {
      autotune::Candidate candidate;
      candidate.engine = engine;
      candidate.strategy = strategy;
      if (candidate.engine == ProductEngine::OneDnn) {
        if (std::string reason = cpu::onednn_unavailable_reason(storage); !reason.empty()) {
          row[std::string(name) + "_error"] = reason;
          continue;
        }
      }
      if (interactive) std::fprintf(stderr, "\r%-18s timing %-9s ...", row["label"].get<std::string>().c_str(), name);
      try {
        const auto executable = autotune::build_candidate(problem, candidate, request.threads);
        const autotune::Timing result = autotune::time_repeated([&] { executable->run(input.data(), output.data()); }, timing);
        row[std::string(name) + "_ms"] = result.p50_ms;
        row[std::string(name) + "_p20_ms"] = result.p20_ms;
        row[std::string(name) + "_p80_ms"] = result.p80_ms;
      } catch (const CompileError& error) {
        row[std::string(name) + "_error"] = error.what();  // gram impossible for this program
      } catch (const cpu::PartNotBuilt& error) {
        row[std::string(name) + "_error"] = error.what();  // openblas in a build without OpenBLAS
      }
    }
    if (interactive) std::fprintf(stderr, "\r%60s\r", "");
    if (row.contains("gram_ms")) row["gram_speedup"] = row["standard_ms"].get<double>() / row["gram_ms"].get<double>();
    const double best = row.contains("gram_ms") ? std::min(row["standard_ms"].get<double>(), row["gram_ms"].get<double>()) : row["standard_ms"].get<double>();
    for (const char* vendor : {"openblas", "onednn"}) {
      const std::string key = std::string(vendor) + "_ms";
      if (row.contains(key) && (!row.contains("vendor_ms") || row[key].get<double>() < row["vendor_ms"].get<double>())) {
        row["vendor_ms"] = row[key];
        row["vendor"] = vendor;
      }
    }
    if (row.contains("vendor_ms")) row["vendor_speedup"] = row["vendor_ms"].get<double>() / best;
    if (on_row) on_row(row);
    rows.push_back(row);
  }
  return {{"title", program.name + " on " + request.title + ", cpu, OpenBLAS " + cpu::openblas_kernel_name() + ", " + cpu::onednn_description()},
          {"shapes", rows}};
}

// ---- plan ---------------------------------------------------------------------------------

nlohmann::json plan_record(const std::string& model_label, const runtime::PartitionPlan& plan) {
  const runtime::PlanSettings& settings = plan.settings;
  const std::string mode = runtime::to_string(settings.mode);
  nlohmann::json data;
  data["title"] = model_label + ": ZeRO-" + std::to_string(settings.stage) + ", " + std::to_string(settings.world) + " ranks, " + mode + " mode";
  data["world"] = settings.world;
  data["stage"] = settings.stage;
  data["mode"] = mode;
  data["padded_elements"] = plan.padded_elements;
  data["partition_elements"] = plan.partition_elements;
  data["ideal_cost"] = plan.ideal_cost();
  data["max_cost"] = plan.max_cost();
  data["mean_cost"] = plan.mean_cost();
  nlohmann::json tensors = nlohmann::json::array(), ranks = nlohmann::json::array(), collectives = nlohmann::json::array();
  int straddlers = 0;
  for (const auto& tensor : plan.tensors) {
    straddlers += tensor.straddles() && tensor.tensor.muon ? 1 : 0;
    tensors.push_back({{"name", tensor.tensor.name}, {"offset", tensor.offset}, {"elements", tensor.tensor.elements}, {"muon", tensor.tensor.muon},
                       {"owners", tensor.owners}, {"orthogonalizers", tensor.orthogonalizers}, {"cost", tensor.cost}});
  }
  for (const auto& rank : plan.ranks)
    ranks.push_back({{"begin", rank.begin}, {"end", rank.end}, {"orthogonalization_cost", rank.orthogonalization_cost}, {"matrices", rank.matrices},
                     {"optimizer_bytes", rank.optimizer_bytes}, {"gradient_bytes", rank.gradient_bytes}, {"parameter_bytes", rank.parameter_bytes},
                     {"gradient_range", {rank.gradient_begin, rank.gradient_end}}});
  for (const auto& collective : plan.collectives)
    collectives.push_back({{"name", collective.name}, {"bytes", collective.bytes}, {"bytes_per_rank", collective.bytes / settings.world}, {"formula", collective.formula}});
  data["tensors"] = tensors;
  data["ranks"] = ranks;
  data["collectives"] = collectives;
  data["straddling_muon_matrices"] = straddlers;
  return data;
}

}  // namespace orthojit::runtime
