// `orthojit tune`: tunes every matrix shape of a model (or one shape) and writes tuning records.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "autotune/device_fingerprint.h"
#include "autotune/model_shapes.h"
#include "autotune/tuner.h"
#include "autotune/tuning_record.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "autotune/cuda_tuner.h"
#endif
#include "passes/pipeline.h"
#include "runtime/orthogonalize.h"
#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/model_config.h"
#include "cpu/vendor_gemm.h"
#include "kernels/program_library.h"

namespace orthojit::cli {

const char* const kTuneHelp = R"(usage: orthojit tune (--model CONFIG.json | --shape MxN[xB]) [options]

Tunes each distinct matrix shape Muon would orthogonalize in the model (a Hugging Face
config.json: dense Llama/Qwen/Mistral, GPT-2, MoE, MLA) and writes the winners to this device's
tuning records, which `orthojit run`, `bench` and the runtime then use under --strategy auto.
Each candidate (strategy, triangular products, blocking, the OpenBLAS engine) is checked against
the f64 reference before it may win, then timed (median of repeats, caches flushed). Shapes that
already have a record are not timed again (--retune to redo them). Records are merged into the
file after every shape, under a lock: nothing is lost when tuning stops early, and two tune
processes may share a file.

options:
  --model CONFIG.json   a model configuration (examples/ has some)
  --shape MxN[xB]       one shape instead of a model
  --program NAME|FILE   the orthogonalizer (default jordan_ns5)
  --precision P         override the program's storage type: bf16, f16 or f32
  --budget SECONDS      time for all shapes together (default 90): each shape gets a quarter
                        of an even share plus a share of the rest in proportion to its cost;
                        the untuned default of a shape is always timed, even over budget
  --backend B           cpu (default) or cuda (generated kernels per tile configuration, the
                        fused small-matrix kernel and the cuBLAS NS, timed with CUDA events;
                        bf16 or f16 storage, so f32 programs need --precision bf16)
  --out FILE            the records file (default: the device's file in the cache directory)
  --per-head            split attention projections into per-head blocks
  --threads T           worker threads (default: one per logical core)
  --retune              time shapes again even when they have records
  --json                print the result table as JSON
)";

namespace {

double shape_cost(const autotune::UniqueShape& shape) {
  const double m = static_cast<double>(shape.rows), n = static_cast<double>(shape.cols);
  return (20 * m * m * n + 10 * m * m * m) * static_cast<double>(shape.batch);
}

std::string shape_text(int64_t rows, int64_t cols, int64_t batch) {
  return std::to_string(rows) + "x" + std::to_string(cols) + (batch > 1 ? "x" + std::to_string(batch) : "");
}

std::string format_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, ms < 10 ? "%.3f" : "%.1f", ms);
  return text;
}

}  // namespace

int tune_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"model", "shape", "program", "precision", "budget", "backend", "out", "threads"}, {"per-head", "retune", "json"});
  const std::string backend = arguments.get("backend").value_or("cpu");
  if (backend != "cpu" && backend != "cuda") throw runtime::UsageError("unknown backend '" + backend + "'; expected cpu or cuda");
#ifdef ORTHOJIT_HAVE_CUDA
  if (backend == "cuda") {
    if (const std::string why = runtime::cuda_backend_unavailable_reason(); !why.empty()) throw runtime::UsageError("--backend cuda: " + why);
  }
#else
  if (backend == "cuda") throw runtime::UsageError("--backend cuda: " + runtime::cuda_backend_unavailable_reason());
#endif
  if (arguments.has("model") == arguments.has("shape")) throw runtime::UsageError("give exactly one of --model CONFIG.json or --shape MxN[xB]");
  const std::string program_name = arguments.get("program").value_or("jordan_ns5");
  const dsl::Program program = kernels::load_program_by_name_or_path(program_name);
  const std::optional<ScalarType> precision = parse_tuning_precision(arguments.get("precision"));
  const double budget = parse_budget(arguments.get("budget"), 90);
  const int threads = arguments.has("threads") ? parse_count(*arguments.get("threads"), "threads") : 0;
  const bool json = arguments.has("json");

  std::vector<autotune::UniqueShape> shapes;
  std::vector<autotune::ModelMatrix> adamw;
  std::string title;
  if (auto model = arguments.get("model")) {
    autotune::ModelShapeOptions shape_options;
    shape_options.per_head = arguments.has("per-head");
    const autotune::ModelShapes derived = load_model_matrices(*model, shape_options);
    shapes = autotune::unique_muon_shapes(derived);
    for (const auto& matrix : derived.matrices)
      if (!matrix.muon) adamw.push_back(matrix);
    title = *model + " (" + derived.model_type + ")";
  } else {
    const ParsedShape shape = parse_shape(*arguments.get("shape"));
    shapes.push_back({std::min(shape.rows, shape.cols), std::max(shape.rows, shape.cols), shape.batch, 1, {"--shape"}});
    title = "shape " + shape_text(shape.rows, shape.cols, shape.batch);
  }

#ifdef ORTHOJIT_HAVE_CUDA
  const autotune::DeviceFingerprint fingerprint = backend == "cuda" ? autotune::cuda_fingerprint() : autotune::cpu_fingerprint();
  if (backend == "cuda") {
    const ScalarType storage = passes::effective_policy(program.policy, precision).storage;
    if (storage != ScalarType::BF16 && storage != ScalarType::F16)
      throw runtime::UsageError("--backend cuda tunes bf16 or f16 storage; " + program.name + " stores " + std::string(to_string(storage)) +
                                ": add --precision bf16 (or f16)");
  }
#else
  const autotune::DeviceFingerprint fingerprint = autotune::cpu_fingerprint();
#endif
  const std::string path = arguments.get("out").value_or(autotune::default_tuning_path(fingerprint));
  const autotune::LoadedRecords existing = autotune::load_tuning_file(path);
  if (!existing.warning.empty()) std::fprintf(stderr, "warning: %s\n", existing.warning.c_str());
  if (existing.file) {
    if (auto reason = fingerprint.mismatch(existing.file->fingerprint))
      throw runtime::UsageError(path + " holds tuning records of another device (" + *reason + "); choose another file with --out");
  }

  if (!json) {
    std::printf("tuning %s with %s on %s (%s, %d cores); records: %s\n", title.c_str(), program.name.c_str(), fingerprint.device.c_str(),
                fingerprint.isa.c_str(), fingerprint.cores, path.c_str());
    std::printf("\n%-22s %7s %8s  %s\n", "matrix shape (oriented)", "batch", "count", "parameters");
    for (const auto& shape : shapes) {
      std::string names;
      for (const auto& name : shape.names) names += (names.empty() ? "" : ", ") + name;
      std::printf("%-22s %7lld %8lld  %s\n", shape_text(shape.rows, shape.cols, 1).c_str(), static_cast<long long>(shape.batch),
                  static_cast<long long>(shape.count), names.c_str());
    }
    for (const auto& matrix : adamw)
      std::printf("%-22s %7s %8lld  %s: AdamW, not tuned\n", shape_text(matrix.rows, matrix.cols, 1).c_str(), "-", static_cast<long long>(matrix.count),
                  matrix.name.c_str());
    std::printf("\n");
  }

  if (const std::string warning = cpu::openblas_kernel_warning(); backend == "cpu" && !warning.empty() && !json) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  const bool interactive = ::isatty(::fileno(stderr)) != 0;
  std::fflush(stdout);
  double total_cost = 0;
  for (const auto& shape : shapes) total_cost += shape_cost(shape);
  const auto started = std::chrono::steady_clock::now();
  nlohmann::json rows = nlohmann::json::array();
  for (size_t index = 0; index < shapes.size(); ++index) {
    const auto& shape = shapes[index];
    const autotune::ProblemKey key = autotune::problem_key(program, shape.rows, shape.cols, shape.batch, precision);
    nlohmann::json entry;
    bool cached = false;
    if (existing.file && existing.file->entries.contains(key.key) && !arguments.has("retune")) {
      entry = existing.file->entries.at(key.key);
      cached = true;
    } else {
      autotune::TuneProblem problem;
      problem.program = &program;
      problem.program_name = program.name;
      problem.rows = shape.rows;
      problem.cols = shape.cols;
      problem.batch = shape.batch;
      problem.precision = precision;
      autotune::TuneSettings settings;
      settings.threads = threads;
      // Every shape gets a floor of a quarter of an even split (cheap shapes are cheap to tune and
      // would otherwise get only their default timed); the rest goes in proportion to cost.
      const double floor = budget / (4.0 * static_cast<double>(shapes.size()));
      settings.budget_seconds = floor + (budget - floor * static_cast<double>(shapes.size())) * shape_cost(shape) / total_cost;
      const std::string label = "[" + std::to_string(index + 1) + "/" + std::to_string(shapes.size()) + "] " + shape_text(shape.rows, shape.cols, shape.batch);
      settings.progress = [&](const autotune::TuneProgress& progress) {
        if (json || !interactive) return;  // a progress bar only on a terminal; logs get one line per shape
        const int width = 20, filled = progress.candidates ? width * (progress.candidate - 1) / progress.candidates : 0;
        std::fprintf(stderr, "\r%-24s [%s%s] %2d/%-2d %-6s %-36s", label.c_str(), std::string(static_cast<size_t>(filled), '#').c_str(),
                     std::string(static_cast<size_t>(width - filled), '.').c_str(), progress.candidate, progress.candidates, progress.phase.c_str(),
                     progress.label.c_str());
      };
#ifdef ORTHOJIT_HAVE_CUDA
      entry = backend == "cuda" ? autotune::tune_shape_cuda(problem, settings) : autotune::tune_shape(problem, settings);
#else
      entry = autotune::tune_shape(problem, settings);
#endif
      if (!json) {
        if (interactive) std::fprintf(stderr, "\r%100s\r", "");
        std::fprintf(stderr, "%-24s tuned in %.1f s\n", label.c_str(), entry["bench"]["elapsed_s"].get<double>());
      }
      std::string warning;
      autotune::merge_into_tuning_file(path, fingerprint, {{key.key, entry}}, &warning);
      if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    }
    nlohmann::json row = {{"rows", shape.rows}, {"cols", shape.cols}, {"batch", shape.batch}, {"count", shape.count}, {"cached", cached}};
    if (!entry["winner"].is_null()) {
      row["winner"] = entry["winner"]["label"];
      row["winner_ms"] = entry["winner"]["p50_ms"];
      if (entry["default"].contains("p50_ms")) row["speedup_over_default"] = entry["default"]["p50_ms"].get<double>() / entry["winner"]["p50_ms"].get<double>();
      if (entry.contains("vendor_p50_ms")) row["speedup_over_vendor"] = entry["vendor_p50_ms"].get<double>() / entry["winner"]["p50_ms"].get<double>();
    }
    int skipped = 0;
    for (const auto& candidate : entry["candidates"]) skipped += candidate["status"] == "skipped_budget" ? 1 : 0;
    row["skipped_for_budget"] = skipped;
    rows.push_back(row);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (json) {
    std::printf("%s\n", nlohmann::json({{"records", path}, {"elapsed_s", elapsed}, {"shapes", rows}}).dump(2).c_str());
    return 0;
  }
  std::printf("\n%-16s %6s %6s  %-46s %10s %12s %12s\n", "shape", "batch", "count", "winner", "time ms", "vs default", backend == "cuda" ? "vs cuBLAS" : "vs OpenBLAS");
  for (const auto& row : rows) {
    auto ratio = [&](const char* name) {
      if (!row.contains(name)) return std::string("-");
      char text[32];
      std::snprintf(text, sizeof text, "%.2fx", row[name].get<double>());
      return std::string(text);
    };
    std::string winner = row.contains("winner") ? row["winner"].get<std::string>() : "(none passed)";
    if (row["cached"].get<bool>()) winner += " (record)";
    const int skipped = row["skipped_for_budget"].get<int>();
    if (skipped > 0) winner += " [" + std::to_string(skipped) + " over budget]";
    std::printf("%-16s %6lld %6lld  %-46s %10s %12s %12s\n", shape_text(row["rows"], row["cols"], 1).c_str(), static_cast<long long>(row["batch"].get<int64_t>()),
                static_cast<long long>(row["count"].get<int64_t>()), winner.c_str(),
                row.contains("winner_ms") ? format_ms(row["winner_ms"].get<double>()).c_str() : "-", ratio("speedup_over_default").c_str(),
                ratio("speedup_over_vendor").c_str());
  }
  std::printf("\ntuned in %.1f s; records in %s\n", elapsed, path.c_str());
  return 0;
}

}  // namespace orthojit::cli
