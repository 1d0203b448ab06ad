// `orthojit bench --model CONFIG.json` (or --shape with --compare): standard Newton–Schulz, Gram
// Newton–Schulz and the vendor library (OpenBLAS, standard iteration with ssyrk) for each shape,
// timed in one run with the tuner's harness; medians and speedups; optionally a plot.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "autotune/model_shapes.h"
#include "autotune/timing_harness.h"
#include "autotune/tuner.h"
#include "cli/arguments.h"
#include "cli/bench_model.h"
#include "runtime/model_config.h"
#include "cli/python_plot.h"
#include "runtime/records.h"
#include "cpu/build_status.h"
#include "cpu/vendor_gemm.h"
#include "kernels/program_library.h"
#include "reference/random_matrix.h"

namespace orthojit::cli {

// The speedup chart (runtime/charts/speedup_chart.py, embedded by cli/CMakeLists.txt; the Python
// package draws the same file's chart in bench_model(...).plot()).
extern const char* const kSpeedupChartScript;

namespace {

void plot(const nlohmann::json& data, const std::string& png) { run_plot_script(kSpeedupChartScript, data, png); }

std::string shape_label(int64_t rows, int64_t cols, int64_t batch) {
  return std::to_string(rows) + "x" + std::to_string(cols) + (batch > 1 ? "x" + std::to_string(batch) : "");
}

}  // namespace

int bench_model_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"model", "shape", "program", "precision", "budget", "threads", "plot", "backend"}, {"per-head", "compare", "json"});
  if (arguments.get("backend").value_or("cpu") != "cpu") throw runtime::UsageError("bench --model compares on the cpu backend (cuda arrives with its backend)");
  if (!cpu::cpu_backend_unavailable_reason().empty()) throw runtime::UsageError("bench --model compares on the cpu backend: " + cpu::cpu_backend_unavailable_reason());
  const std::string program_name = arguments.get("program").value_or("jordan_ns5");
  const dsl::Program program = kernels::load_program_by_name_or_path(program_name);
  const std::optional<ScalarType> precision = runtime::parse_tuning_precision(arguments.get("precision"));
  const double budget = parse_budget(arguments.get("budget"), 60);
  const int threads = arguments.has("threads") ? parse_threads(*arguments.get("threads")) : 0;
  // Before the benchmark, not after its minutes: a chart that cannot be drawn.
  if (auto png = arguments.get("plot"))
    if (const std::string why = plot_unavailable_reason(*png); !why.empty()) throw runtime::UsageError("--plot " + *png + ": " + why);
  std::vector<autotune::UniqueShape> shapes;
  std::string title;
  if (auto model = arguments.get("model")) {
    autotune::ModelShapeOptions options;
    options.per_head = arguments.has("per-head");
    const autotune::ModelShapes derived = runtime::load_model_matrices(*model, options);
    shapes = autotune::unique_muon_shapes(derived);
    title = std::filesystem::path(*model).filename().string();
  } else {
    const runtime::ParsedShape shape = runtime::parse_shape(arguments.require("shape"));
    shapes.push_back(runtime::single_tuning_shape(shape));
    title = shape_label(shape.rows, shape.cols, shape.batch);
  }
  const bool json = arguments.has("json");
  if (const std::string warning = cpu::openblas_kernel_warning(); !warning.empty() && !json) std::fprintf(stderr, "warning: %s\n", warning.c_str());

  if (!json)
    std::printf("%-18s %6s %6s %12s %12s %12s %12s %10s %12s\n", "shape", "batch", "count", "standard ms", "gram ms", "OpenBLAS ms", "oneDNN ms", "gram/std",
                "best/vendor");
  std::fflush(stdout);
  runtime::CompareRequest request{&program, shapes, title, precision, budget, threads};
  const nlohmann::json data = runtime::compare_record(request, [&](const nlohmann::json& row) {
    if (json) return;
    auto cell = [&](const char* key, const char* format) {
      if (!row.contains(key)) return std::string("-");
      char text[32];
      std::snprintf(text, sizeof text, format, row[key].get<double>());
      return std::string(text);
    };
    std::fflush(stdout);
    std::printf("%-18s %6lld %6lld %12s %12s %12s %12s %10s %12s\n", row["label"].get<std::string>().c_str(), static_cast<long long>(row["batch"].get<int64_t>()),
                static_cast<long long>(row["count"].get<int64_t>()), cell("standard_ms", "%.2f").c_str(), cell("gram_ms", "%.2f").c_str(), cell("openblas_ms", "%.2f").c_str(),
                cell("onednn_ms", "%.2f").c_str(), cell("gram_speedup", "%.2fx").c_str(), cell("vendor_speedup", "%.2fx").c_str());
    std::fflush(stdout);
  }, !json);
  if (json) std::printf("%s\n", data.dump(2).c_str());
  else {
    std::printf("medians of repeats with caches flushed; gram/std = standard time / gram time; best/vendor = the faster vendor library's time / the faster of\n"
                "standard and gram (vendors: OpenBLAS %s, %s; oneDNN for 16-bit storage only)\n",
                cpu::openblas_kernel_name(), cpu::onednn_description().c_str());
  }
  if (auto png = arguments.get("plot")) {
    plot(data, *png);
    if (!json) std::printf("plot: %s\n", png->c_str());
  }
  return 0;
}

}  // namespace orthojit::cli
