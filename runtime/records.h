// The structured results of `tune`, `bench` (one program, and --model/--compare) and `plan`: the
// work of those commands without their argument parsing and tables, shared by the CLI (which
// prints them, or their JSON with --json) and the Python bindings (bindings/python), which return
// the same JSON records as Python objects.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autotune/device_fingerprint.h"
#include "autotune/gram_restart_search.h"
#include "autotune/model_shapes.h"
#include "autotune/tuning_loop.h"
#include "autotune/tuning_options.h"
#include "autotune/tuning_record.h"
#include "dsl/ast.h"
#include "runtime/orthogonalize.h"
#include "runtime/shared_options.h"
#include "runtime/zero/partition_plan.h"

namespace orthojit::runtime {

// ---- info ---------------------------------------------------------------------------------

// The cache directory: $ORTHOJIT_CACHE_DIR, else $XDG_CACHE_HOME/orthojit, else ~/.cache/orthojit.
std::string cache_directory();

// What `orthojit info` prints, as JSON: version, backends, cuda (available, reason or device),
// host cpu and its features, cpu paths, cache directory, tuning records, shipped programs.
nlohmann::json info_record();

// ---- tune ----------------------------------------------------------------------------------

struct TuneRequest {
  const dsl::Program* program = nullptr;
  std::vector<autotune::UniqueShape> shapes;  // oriented (rows <= cols)
  std::optional<ScalarType> precision;
  double budget = 90;            // seconds for all shapes together
  autotune::TuneBackend backend = autotune::TuneBackend::Cpu;  // parsed once where the option enters (CLI, Python)
  bool proxy_timing = true;      // large shapes ranked by the proxy (autotune/tuning_loop.h); false: every candidate on the full iteration
  std::optional<std::string> out;  // the records file (default: the device's file)
  bool retune = false;
  int threads = 0;
  // The gram restarts the shapes are tuned with (tune --restarts): the program's own, the restart
  // search's (autotune/gram_restart_search.h), or given positions. Under auto or given positions a
  // recorded shape whose restarts differ is tuned again.
  autotune::RestartRequest restarts;
  // Called as each shape's candidates are checked and timed (the Python progress bar): the
  // shape's index and count, its text ("1024x4096"), and the loop's progress within it; a
  // finished or cached shape reports candidate == candidates.
  std::function<void(size_t shape, size_t shapes, const std::string& text, const autotune::TuneProgress& progress)> on_progress;
};

// Where the records go and what is there already.
struct TuneTarget {
  autotune::DeviceFingerprint fingerprint;
  std::string path;
  autotune::LoadedRecords existing;
};

// Checks that the backend is available (and that cuda tunes 16-bit storage), picks the records
// file and loads it.
// Throws runtime::UsageError (unknown or unavailable backend, a file of another device).
TuneTarget prepare_tuning(const TuneRequest& request);

struct TuneOutcome {
  nlohmann::json shapes = nlohmann::json::array();   // one row per shape, as `tune --json` prints them
  std::vector<std::string> keys;   // per shape: its problem key in the records file
  std::vector<nlohmann::json> entries;  // per shape: its tuning-record entry (new or cached)
  // The restarts tuned with: {"restarts": [...], "source": "program" | "auto" | "explicit"} and,
  // for auto, "search" (RestartChoice::to_json).
  nlohmann::json restarts;
  double elapsed_s = 0;
};

// Tunes every shape not already recorded (or all with retune), merging each result into the file
// as soon as it is known. `report`: progress and one line per shape on stderr.
TuneOutcome run_tuning(const TuneRequest& request, const TuneTarget& target, bool report);

// The oriented shape `--shape MxN[xB]` tunes.
autotune::UniqueShape single_tuning_shape(const ParsedShape& shape);

// ---- bench (one program, one shape) -----------------------------------------------------------

struct BenchRequest {
  const dsl::Program* program = nullptr;
  ParsedShape shape;
  runtime::OrthogonalizeOptions options;  // backend defaults to cpu here
  int repeat = 7;
};

// The `bench --json` record: program, shape, backend, target, strategy, storage, median_s, p20_s,
// p80_s, repeat, jit_s, dense_equivalent_gflop, gflops, peak_gflops, fraction_of_peak, peak.
// `report`: the warm-up and each run's time on stderr. Throws runtime::UsageError / CompileError.
nlohmann::json bench_record(const BenchRequest& request, bool report);

// ---- bench --model / --compare ----------------------------------------------------------------

struct CompareRequest {
  const dsl::Program* program = nullptr;
  std::vector<autotune::UniqueShape> shapes;
  std::string title;  // "<program> on <title>, cpu, OpenBLAS <kernel>, oneDNN <version, matmuls>" in the record
  std::optional<ScalarType> precision;
  double budget = 60;
  int threads = 0;
};

// {"title", "shapes": [{rows, cols, batch, count, label, standard_ms, gram_ms, openblas_ms,
// onednn_ms (16-bit storage), vendor_ms and vendor (the faster library), ..., gram_speedup,
// vendor_speedup}]}: standard vs gram vs the vendor libraries per shape. `on_row` sees each
// row as soon as it is timed; `progress`: a progress line on stderr while timing.
nlohmann::json compare_record(const CompareRequest& request, const std::function<void(const nlohmann::json&)>& on_row, bool progress);

// ---- plan ---------------------------------------------------------------------------------

// The `plan --json` record of a partition plan (title, world, stage, mode, padded_elements,
// partition_elements, ideal/max/mean cost, tensors, ranks, collectives, straddling_muon_matrices).
// `model_label` names the model in the title. (The plan: runtime::plan_partitions of
// runtime::model_plan_tensors of the model's matrices.)
nlohmann::json plan_record(const std::string& model_label, const runtime::PartitionPlan& plan);

}  // namespace orthojit::runtime
