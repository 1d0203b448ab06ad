// `orthojit tune`: tunes every matrix shape of a model (or one shape) and writes tuning records.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "autotune/device_fingerprint.h"
#include "autotune/gram_restart_search.h"
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
#include "runtime/model_config.h"
#include "runtime/records.h"
#include "cpu/build_status.h"
#include "cpu/vendor_gemm.h"
#include "kernels/program_library.h"

namespace orthojit::cli {

const char* const kTuneHelp = R"(usage: orthojit tune (--model CONFIG.json | --shape MxN[xB]) [options]

Tunes each distinct matrix shape Muon would orthogonalize in the model (a Hugging Face
config.json: dense Llama/Qwen/Mistral, GPT-2, MoE, MLA) and writes the winners to this device's
tuning records, which `orthojit run`, `bench` and the runtime then use under --strategy auto.
Each candidate (strategy, triangular products, blocking, the vendor engines OpenBLAS and, for
bf16/f16 storage, oneDNN) is checked against
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
  --threads T           worker threads, 1 to 1024 (default: one per logical core)
  --retune              time shapes again even when they have records
  --restarts R          the gram restarts the candidates are tuned with, stored in the record and
                        applied by the runtime with it: auto (the restart search: the scalar Gram
                        iteration over a spectrum down to 1e-10 with R perturbed by the storage's
                        rounding, minimizing max|Q|, as Dao-AILab's restart autotuner), none, or
                        step indices in 1..steps-1 (2 or 2,4); default: the program's own
  --full-timing         time every candidate on the full iteration (default: a shape whose
                        iteration costs 1e10 FLOPs or more ranks candidates by their first step
                        at the full shape, then times the finalists on the full iteration)
  --json                print the result table as JSON
)";

namespace {

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
  Arguments arguments(args, {"model", "shape", "program", "precision", "budget", "backend", "out", "threads", "restarts"},
                      {"per-head", "retune", "json", "full-timing"});
  runtime::TuneRequest request;
  // The backend's name is parsed here, once; what follows passes the enum.
  const std::string backend_name = arguments.get("backend").value_or("cpu");
  const auto parsed_backend = autotune::parse_tune_backend(backend_name);
  if (!parsed_backend) throw runtime::UsageError("unknown backend '" + backend_name + "'; expected cpu or cuda");
  request.backend = *parsed_backend;
  const bool cuda = request.backend == autotune::TuneBackend::Cuda;
  if (!cuda && !cpu::cpu_backend_unavailable_reason().empty())
    throw runtime::UsageError("--backend cpu (the default): " + cpu::cpu_backend_unavailable_reason() + " (tune --backend cuda tunes the GPU's kernels)");
  if (cuda) {
    if (const std::string why = runtime::cuda_backend_unavailable_reason(); !why.empty()) throw runtime::UsageError("--backend cuda: " + why);
  }
  request.proxy_timing = !arguments.has("full-timing");
  if (arguments.has("model") == arguments.has("shape")) throw runtime::UsageError("give exactly one of --model CONFIG.json or --shape MxN[xB]");
  const std::string program_name = arguments.get("program").value_or("jordan_ns5");
  const dsl::Program program = kernels::load_program_by_name_or_path(program_name);
  request.program = &program;
  request.precision = runtime::parse_tuning_precision(arguments.get("precision"));
  if (auto restarts = arguments.get("restarts")) {
    try {
      request.restarts = autotune::parse_restart_request(*restarts, static_cast<int>(program.steps.size()));
    } catch (const std::invalid_argument& error) {
      throw runtime::UsageError(std::string("--restarts: ") + error.what() + " (" + program.name + " has " + std::to_string(program.steps.size()) + " steps)");
    }
  }
  request.budget = parse_budget(arguments.get("budget"), 90);
  request.threads = arguments.has("threads") ? parse_threads(*arguments.get("threads")) : 0;
  request.out = arguments.get("out");
  request.retune = arguments.has("retune");
  const bool json = arguments.has("json");

  std::vector<autotune::ModelMatrix> adamw;
  std::string title;
  if (auto model = arguments.get("model")) {
    autotune::ModelShapeOptions shape_options;
    shape_options.per_head = arguments.has("per-head");
    const autotune::ModelShapes derived = runtime::load_model_matrices(*model, shape_options);
    request.shapes = autotune::unique_muon_shapes(derived);
    for (const auto& matrix : derived.matrices)
      if (!matrix.muon) adamw.push_back(matrix);
    title = *model + " (" + derived.model_type + ")";
  } else {
    const runtime::ParsedShape shape = runtime::parse_shape(*arguments.get("shape"));
    request.shapes.push_back(runtime::single_tuning_shape(shape));
    title = "shape " + shape_text(shape.rows, shape.cols, shape.batch);
  }

  const runtime::TuneTarget target = runtime::prepare_tuning(request);
  const autotune::DeviceFingerprint& fingerprint = target.fingerprint;
  const std::string& path = target.path;
  if (!target.existing.warning.empty()) std::fprintf(stderr, "warning: %s\n", target.existing.warning.c_str());

  if (!json) {
    std::printf("tuning %s with %s on %s (%s, %d cores); records: %s\n", title.c_str(), program.name.c_str(), fingerprint.device.c_str(),
                fingerprint.isa.c_str(), fingerprint.cores, path.c_str());
    std::printf("\n%-22s %7s %8s  %s\n", "matrix shape (oriented)", "batch", "count", "parameters");
    for (const auto& shape : request.shapes) {
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

  if (const std::string warning = cpu::openblas_kernel_warning(); !cuda && !warning.empty() && !json) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  std::fflush(stdout);
  const runtime::TuneOutcome outcome = runtime::run_tuning(request, target, !json);
  const nlohmann::json& rows = outcome.shapes;
  const double elapsed = outcome.elapsed_s;
  if (json) {
    std::printf("%s\n", nlohmann::json({{"records", path}, {"elapsed_s", elapsed}, {"restarts", outcome.restarts}, {"shapes", rows}}).dump(2).c_str());
    return 0;
  }
  // The restarts every shape was tuned with, and what the search found.
  const nlohmann::json& restarts = outcome.restarts;
  std::printf("\ngram restarts: %s (%s)", autotune::restarts_text(restarts["restarts"].get<std::vector<int>>()).c_str(),
              restarts["source"].get<std::string>().c_str());
  if (restarts.contains("search")) {
    const nlohmann::json& search = restarts["search"];
    auto objective = [](const nlohmann::json& value) {
      if (!value.is_number()) return value.get<std::string>();  // "inf": the trajectory overflows
      char text[32];
      std::snprintf(text, sizeof text, "%.3g", value.get<double>());
      return std::string(text);
    };
    std::printf(": max|Q| %s; the program's %s: %s; best by count:", objective(search["max_abs_q"]).c_str(),
                autotune::restarts_text(search["program"]["restarts"].get<std::vector<int>>()).c_str(), objective(search["program"]["max_abs_q"]).c_str());
    for (const auto& set : search["best_per_count"])
      std::printf(" %s %s", autotune::restarts_text(set["restarts"].get<std::vector<int>>()).c_str(), objective(set["max_abs_q"]).c_str());
    std::printf(" (%s storage, R perturbed by %.3g)", search["storage"].get<std::string>().c_str(), search["perturbation"].get<double>());
  }
  std::printf("\n");
  std::printf("\n%-16s %6s %6s  %-46s %10s %12s %-24s\n", "shape", "batch", "count", "winner", "time ms", "vs default", cuda ? "vs cuBLAS" : "vs best vendor");
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
    std::string vendor = ratio("speedup_over_vendor");
    if (row.contains("vendor") && !cuda) vendor += " (" + row["vendor"].get<std::string>() + ")";
    std::printf("%-16s %6lld %6lld  %-46s %10s %12s %-24s\n", shape_text(row["rows"], row["cols"], 1).c_str(), static_cast<long long>(row["batch"].get<int64_t>()),
                static_cast<long long>(row["count"].get<int64_t>()), winner.c_str(),
                row.contains("winner_ms") ? format_ms(row["winner_ms"].get<double>()).c_str() : "-", ratio("speedup_over_default").c_str(), vendor.c_str());
  }
  int judged = 0, skipped = 0, by_proxy = 0, recorded = 0, recorded_untimed = 0;
  for (const auto& row : rows)
    if (!row["cached"].get<bool>()) {
      judged += row["judged"].get<int>();
      skipped += row["skipped_for_budget"].get<int>();
      by_proxy += row["ranked_by_proxy"].get<int>();
    } else {
      ++recorded;
      recorded_untimed += row["skipped_for_budget"].get<int>();
    }
  std::printf("\ntuned in %.1f s; %d candidates judged (%d ranked by proxy), %d left untimed (over budget); records in %s\n", elapsed, judged, by_proxy,
              skipped, path.c_str());
  // Records written elsewhere than where run, bench and the runtime look (--out) are not found
  // by them unless the variable names the file.
  if (path != autotune::default_tuning_path(target.fingerprint))
    std::printf("run, bench and the runtime read these records only with ORTHOJIT_TUNING_FILE=%s (they look in %s)\n", path.c_str(),
                autotune::default_tuning_path(target.fingerprint).c_str());
  // Shapes found in the records were not timed now: say so, and how to redo those whose earlier
  // run left candidates untimed (a larger --budget alone does not).
  if (recorded > 0)
    std::printf("%d shape(s) taken from earlier records without timing%s\n", recorded,
                recorded_untimed > 0 ? (", where " + std::to_string(recorded_untimed) + " candidates were left untimed then; --retune times them again").c_str() : "");
  return 0;
}

}  // namespace orthojit::cli
