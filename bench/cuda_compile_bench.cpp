// What a user waits for before a CUDA program runs: the cold NVRTC compile of each shipped program
// and shape (nothing cached), and the warm load of the same program from the disk cache in a
// new process (docs/cuda-backend.md, "NVRTC and the program cache"). Kernels are specialized to
// the shape, so every program x shape x strategy x variant is its own compile.
//
// Per case, in a program cache directory of its own (fresh, so the first compile is cold):
//   schedule   passes::compile_program (the IR pipeline), ms
//   generate   the CUDA C++ of the variant, ms
//   cold       NVRTC through the cache (a miss: compile, then the file written), s
//   cache hit  a new ProgramCache object on the same directory (an empty memory layer, as in a new
//              process): the key over source and headers, the file read and its checksum, ms
//   runner     with a device: build_cuda_runner on the warm cache (generate, the cache hit,
//              cuModuleLoadData, the workspace, the tensor maps), ms
//   warm       schedule + generate + cache hit without a device; schedule + runner with one
// The warm times are medians of --repeats. A case passes the bound when warm < 5 ms; the
// table says which do. Without a device the module load is not measured, and the table says so.
//
// Usage: orthojit_cuda_compile_bench [--out-dir DIR] [--programs P,Q] [--shapes RxC[xB],...]
//                                    [--strategies standard,gram] [--arch sm_XX] [--repeats N]
//                                    [--quick] [--keep-cache DIR]
//   default: every shipped program with 16-bit storage, shapes 1024x4096 and 128x2048x32, both
//   strategies, variants generated, generated hopper (sm_90 only, when a product qualifies) and
//   fused-small (where it applies); --quick: jordan_ns5 only. Writes compile_bench.json and
//   compile_bench_table.txt into DIR after every case. Exit 1 when a case failed to compile.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/json_text.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"
#include "cuda/program_cache.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"

namespace {

using namespace orthojit;
using bench::json_string;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kWarmBoundMs = 5.0;  // issue 16: "warm load from the disk cache < 5 ms"

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

struct Shape {
  int64_t rows = 0, cols = 0, batch = 1;
  std::string text() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + (batch > 1 ? "x" + std::to_string(batch) : "");
  }
};

Shape parse_shape(const std::string& text) {
  Shape shape;
  long long r = 0, c = 0, b = 1;
  char tail = 0;
  const int fields = std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &r, &c, &b, &tail);
  if ((fields != 2 && fields != 3) || r <= 0 || c <= 0 || b <= 0)
    throw std::invalid_argument("--shapes: '" + text + "' is not ROWSxCOLS or ROWSxCOLSxBATCH with positive numbers (e.g. 1024x4096, 128x2048x32)");
  shape.rows = r;
  shape.cols = c;
  shape.batch = fields == 3 ? b : 1;
  return shape;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ',');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

struct Row {
  std::string program, shape, strategy, variant, target;
  size_t launches = 0, image_bytes = 0;
  double schedule_ms = 0, generate_ms = 0, cold_s = 0, cache_hit_ms = 0, runner_ms = 0, warm_ms = 0;
  bool runner_measured = false;
  std::string error;    // a failed case
  std::string skipped;  // a case the backend does not run, with the reason (not a failure)
};

Row new_row(const std::string& program, const Shape& shape, ir::StrategyKind strategy, const std::string& variant, const std::string& target) {
  Row row;
  row.program = program;
  row.shape = shape.text();
  row.strategy = ir::to_string(strategy);
  row.variant = variant;
  row.target = target;
  return row;
}

std::string table_text(const std::vector<Row>& rows, const std::string& device_note) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%-22s %-12s %-8s %-18s %-7s %8s %8s | %8s %8s %8s %8s %9s | %s\n", "program", "shape", "strategy", "variant", "target",
                "launches", "cubin KB", "cold s", "sched ms", "gen ms", "hit ms", "warm ms", "< 5 ms");
  out << line;
  int within = 0, measured = 0;
  for (const Row& row : rows) {
    if (!row.error.empty() || !row.skipped.empty()) {
      const std::string& why = row.error.empty() ? row.skipped : row.error;
      std::snprintf(line, sizeof line, "%-22s %-12s %-8s %-18s %s: %s\n", row.program.c_str(), row.shape.c_str(), row.strategy.c_str(), row.variant.c_str(),
                    row.error.empty() ? "not compiled" : "failed", why.substr(0, why.find('\n')).substr(0, 160).c_str());
      out << line;
      continue;
    }
    ++measured;
    within += row.warm_ms < kWarmBoundMs;
    std::snprintf(line, sizeof line, "%-22s %-12s %-8s %-18s %-7s %8zu %8.0f | %8.2f %8.2f %8.2f %8.2f %9.2f | %s\n", row.program.c_str(), row.shape.c_str(),
                  row.strategy.c_str(), row.variant.c_str(), row.target.c_str(), row.launches, static_cast<double>(row.image_bytes) / 1024.0, row.cold_s,
                  row.schedule_ms, row.generate_ms, row.cache_hit_ms, row.warm_ms, row.warm_ms < kWarmBoundMs ? "yes" : "NO");
    out << line;
  }
  std::vector<double> cold;
  for (const Row& row : rows)
    if (row.error.empty() && row.skipped.empty()) cold.push_back(row.cold_s);
  if (!cold.empty()) {
    std::snprintf(line, sizeof line, "\n%d of %d cases load warm in under %.0f ms; cold compiles: median %.2f s, longest %.2f s\n", within, measured, kWarmBoundMs,
                  median(cold), *std::max_element(cold.begin(), cold.end()));
    out << line;
  }
  out << device_note << "\n";
  return out.str();
}

void write_outputs(const std::string& out_dir, const std::vector<Row>& rows, const std::string& device, const std::string& device_note, bool complete,
                   int repeats) {
  fs::create_directories(out_dir);
  std::ofstream json(out_dir + "/compile_bench.json");
  json << "{\n  \"nvrtc\": " << json_string(cuda::nvrtc_version()) << ",\n  \"device\": " << json_string(device) << ",\n  \"note\": " << json_string(device_note)
       << ",\n  \"warm_bound_ms\": " << kWarmBoundMs << ",\n  \"repeats\": " << repeats << ",\n  \"complete\": " << (complete ? "true" : "false") << ",\n  \"cases\": [\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    json << "    {\"program\": " << json_string(row.program) << ", \"shape\": " << json_string(row.shape) << ", \"strategy\": " << json_string(row.strategy)
         << ", \"variant\": " << json_string(row.variant) << ", \"target\": " << json_string(row.target);
    if (!row.error.empty()) json << ", \"error\": " << json_string(row.error);
    else if (!row.skipped.empty()) json << ", \"not_compiled\": " << json_string(row.skipped);
    else
      json << ", \"launches\": " << row.launches << ", \"image_bytes\": " << row.image_bytes << ", \"schedule_ms\": " << row.schedule_ms
           << ", \"generate_ms\": " << row.generate_ms << ", \"cold_compile_s\": " << row.cold_s << ", \"cache_hit_ms\": " << row.cache_hit_ms
           << ", \"runner_ms\": " << (row.runner_measured ? std::to_string(row.runner_ms) : "null") << ", \"warm_ms\": " << row.warm_ms;
    json << "}" << (r + 1 < rows.size() ? "," : "") << "\n";
  }
  json << "  ]\n}\n";
  std::ofstream(out_dir + "/compile_bench_table.txt") << table_text(rows, device_note);
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".", arch, keep_cache;
  std::vector<std::string> program_names;
  std::vector<Shape> shapes;
  std::vector<ir::StrategyKind> strategies;
  int repeats = 5;
  bool quick = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string argument = argv[i];
      const bool has_value = i + 1 < argc;
      if (argument == "--out-dir" && has_value) out_dir = argv[++i];
      else if (argument == "--programs" && has_value) program_names = split_commas(argv[++i]);
      else if (argument == "--shapes" && has_value)
        for (const std::string& text : split_commas(argv[++i])) shapes.push_back(parse_shape(text));
      else if (argument == "--strategies" && has_value)
        for (const std::string& text : split_commas(argv[++i])) {
          if (text == "standard") strategies.push_back(ir::StrategyKind::Standard);
          else if (text == "gram") strategies.push_back(ir::StrategyKind::Gram);
          else throw std::invalid_argument("--strategies: '" + text + "' is not standard or gram");
        }
      else if (argument == "--arch" && has_value) arch = argv[++i];
      else if (argument == "--repeats" && has_value) repeats = std::max(1, std::atoi(argv[++i]));
      else if (argument == "--keep-cache" && has_value) keep_cache = argv[++i];
      else if (argument == "--quick") quick = true;
      else throw std::invalid_argument("unknown or incomplete argument '" + argument + "'");
    }
    if (!arch.empty()) {
      int sm = 0;
      if (std::sscanf(arch.c_str(), "sm_%d", &sm) != 1 || arch != "sm_" + std::to_string(sm) || sm < 80 || sm > cuda::newest_supported_sm())
        throw std::invalid_argument("--arch '" + arch + "': expected sm_80 ... sm_" + std::to_string(cuda::newest_supported_sm()) + " (this NVRTC's newest)");
    }
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr,
                 "orthojit_cuda_compile_bench: %s\nusage: orthojit_cuda_compile_bench [--out-dir DIR] [--programs P,Q] [--shapes RxC[xB],...] [--arch sm_XX] "
                 "[--strategies standard,gram] [--repeats N] [--quick] [--keep-cache DIR]\n",
                 error.what());
    return 2;
  }
  // The device, when there is one: its target and its SM count shape the generated code, and its
  // module load is part of the warm time.
  std::string device_reason, device_text;
  bool have_device = cuda::driver(&device_reason) != nullptr;
  if (have_device) try {
      device_text = cuda::Device::get().info().describe();
    } catch (const std::exception& error) {
      have_device = false;
      device_reason = error.what();
    }
  if (have_device && !arch.empty() && arch != cuda::Device::get().compile_target()) {
    std::fprintf(stderr, "orthojit_cuda_compile_bench: --arch %s differs from the device's %s; the module loads are not measured\n", arch.c_str(),
                 cuda::Device::get().compile_target().c_str());
    have_device = false;
    device_reason = "--arch differs from the device's target";
  }
  if (arch.empty()) arch = have_device ? cuda::Device::get().compile_target() : "sm_90";
  const int sm = std::atoi(arch.c_str() + 3);
  const int shared_limit = have_device ? cuda::Device::get().info().max_shared_per_block_optin : (sm >= 90 ? 227 * 1024 : 163 * 1024);
  const int multiprocessors = have_device ? cuda::Device::get().info().multiprocessors : 132;
  const std::string device_note = have_device ? "device: " + device_text + "; warm = schedule + runner (the module loaded on it)"
                                              : "no device (" + device_reason + "): warm = schedule + generate + cache hit, without cuModuleLoadData";

  // By default the shipped programs with 16-bit storage (what the CUDA backend runs); a named
  // f32 program is compiled with bf16 storage, as gpu_bench and `--precision bf16` do.
  if (program_names.empty()) {
    if (quick) program_names = {"jordan_ns5"};
    else
      for (const kernels::ShippedProgram& shipped : kernels::shipped_programs()) {
        const ScalarType storage = kernels::load_program_by_name_or_path(std::string(shipped.name)).policy.storage;
        if (storage == ScalarType::BF16 || storage == ScalarType::F16) program_names.emplace_back(shipped.name);
      }
  }
  if (shapes.empty()) shapes = {{1024, 4096, 1}, {128, 2048, 32}};
  if (strategies.empty()) strategies = {ir::StrategyKind::Standard, ir::StrategyKind::Gram};

  const fs::path cache_root = keep_cache.empty() ? fs::temp_directory_path() / ("orthojit-compile-bench-" + std::to_string(::getpid())) : fs::path(keep_cache);
  const auto& headers = kernels::cuda_device_headers();
  std::vector<Row> rows;
  int failures = 0;
  int case_index = 0;
  std::printf("NVRTC %s, target %s; %s\n", cuda::nvrtc_version().c_str(), arch.c_str(), device_note.c_str());
  for (const std::string& name : program_names) {
    dsl::Program program;
    try {
      program = kernels::load_program_by_name_or_path(name);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "orthojit_cuda_compile_bench: --programs: %s\n", error.what());
      return 2;
    }
    for (const Shape& shape : shapes)
      for (ir::StrategyKind strategy : strategies) {
        passes::CompileOptions options;
        options.rows = shape.rows;
        options.cols = shape.cols;
        options.batch = shape.batch;
        options.strategy = strategy;
        if (program.policy.storage != ScalarType::BF16 && program.policy.storage != ScalarType::F16) options.precision = ScalarType::BF16;
        auto schedule_start = Clock::now();
        ir::Function function;
        try {
          function = passes::compile_program(program, options);
        } catch (const std::exception& error) {
          Row row = new_row(name, shape, strategy, "-", arch);
          row.error = std::string("scheduling: ") + error.what();
          rows.push_back(row);
          ++failures;
          continue;
        }
        std::vector<double> schedule_times{ms_since(schedule_start)};
        for (int r = 1; r < repeats; ++r) {
          schedule_start = Clock::now();
          (void)passes::compile_program(program, options);
          schedule_times.push_back(ms_since(schedule_start));
        }
        std::vector<cuda::CudaVariant> variants(1);
        if (sm == 90) {
          cuda::CudaVariant hopper;
          hopper.hopper = true;
          variants.push_back(hopper);
        }
        variants.push_back({cuda::CudaVariant::Kind::FusedSmall, std::nullopt});
        for (const cuda::CudaVariant& variant : variants) {
          Row row = new_row(name, shape, strategy, variant.label(), arch);
          if (std::string why = cuda::variant_unavailable_reason(function, variant, shared_limit); !why.empty()) {
            // The optional variants are listed only where they apply; the default one always.
            if (variant.kind != cuda::CudaVariant::Kind::Generated || variant.hopper) continue;
            row.skipped = why;
            rows.push_back(row);
            std::printf("%-22s %-12s %-8s %-18s not compiled: %s\n", row.program.c_str(), row.shape.c_str(), row.strategy.c_str(), row.variant.c_str(), why.c_str());
            continue;
          }
          row.schedule_ms = median(schedule_times);
          try {
            std::vector<double> generate_times;
            cuda::CudaProgram generated;
            for (int r = 0; r < repeats; ++r) {
              const auto start = Clock::now();
              generated = cuda::generate_variant(function, variant, shared_limit, multiprocessors);
              generate_times.push_back(ms_since(start));
            }
            if (variant.hopper && !generated.needs_sm90a()) continue;  // no product qualifies: the same program as generated
            row.generate_ms = median(generate_times);
            row.launches = generated.launches.size();
            row.target = generated.compile_target(arch);
            const fs::path directory = cache_root / std::to_string(case_index++);
            fs::remove_all(directory);
            cuda::ProgramCache cold_cache(directory, int64_t{1} << 30);
            const auto cold = cold_cache.get_or_compile(generated.source, headers, row.target);
            if (cold.source != cuda::ProgramCache::Result::Source::Compiled)
              throw std::runtime_error("the fresh cache directory " + directory.string() + " already held the program");
            row.cold_s = cold.compile_seconds;
            row.image_bytes = cold.output.image.size();
            std::vector<double> hit_times, runner_times;
            for (int r = 0; r < repeats; ++r) {
              cuda::ProgramCache warm_cache(directory, int64_t{1} << 30);  // an empty memory layer, as in a new process
              const auto start = Clock::now();
              const auto warm = warm_cache.get_or_compile(generated.source, headers, row.target);
              hit_times.push_back(ms_since(start));
              if (warm.source != cuda::ProgramCache::Result::Source::Disk)
                throw std::runtime_error("the warm load did not come from the disk cache (" + directory.string() + ")");
              if (warm.output.image != cold.output.image) throw std::runtime_error("the disk cache returned a different image than NVRTC compiled");
            }
            row.cache_hit_ms = median(hit_times);
            row.warm_ms = row.schedule_ms + row.generate_ms + row.cache_hit_ms;
            if (have_device) {
              for (int r = 0; r < repeats; ++r) {
                cuda::ProgramCache warm_cache(directory, int64_t{1} << 30);
                const auto start = Clock::now();
                auto runner = cuda::build_cuda_runner(program, function, variant, headers, &warm_cache);
                runner_times.push_back(ms_since(start));
                // The runner generates the source again from the device's numbers; a different
                // source would be a cold compile timed as a warm load.
                if (runner->description().find("(disk cache)") == std::string::npos)
                  throw std::runtime_error("the runner did not load from the disk cache: " + runner->description());
              }
              row.runner_ms = median(runner_times);
              row.runner_measured = true;
              row.warm_ms = row.schedule_ms + row.runner_ms;
            }
            if (keep_cache.empty()) fs::remove_all(directory);
            std::printf("%-22s %-12s %-8s %-18s cold %6.2f s, warm %6.2f ms (schedule %.2f, generate %.2f, cache hit %.2f%s)\n", row.program.c_str(),
                        row.shape.c_str(), row.strategy.c_str(), row.variant.c_str(), row.cold_s, row.warm_ms, row.schedule_ms, row.generate_ms,
                        row.cache_hit_ms, row.runner_measured ? (", runner " + std::to_string(row.runner_ms)).c_str() : "");
          } catch (const std::exception& error) {
            row.error = error.what();
            ++failures;
            std::printf("%-22s %-12s %-8s %-18s failed: %s\n", row.program.c_str(), row.shape.c_str(), row.strategy.c_str(), row.variant.c_str(),
                        row.error.substr(0, row.error.find('\n')).c_str());
          }
          std::fflush(stdout);
          rows.push_back(row);
          write_outputs(out_dir, rows, device_text, device_note, false, repeats);
        }
      }
  }
  if (keep_cache.empty()) {
    std::error_code ignored;
    fs::remove_all(cache_root, ignored);
  }
  write_outputs(out_dir, rows, device_text, device_note, true, repeats);
  std::printf("\n%s", table_text(rows, device_note).c_str());
  return failures == 0 ? 0 : 1;
}
