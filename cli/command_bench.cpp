// `orthojit bench`: times one program on one shape and backend: median, p20, p80 over repeats,
// the achieved dense-equivalent GFLOP/s and the fraction of this machine's peak.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/arguments.h"
#include "cli/bench_model.h"
#include "cli/commands.h"
#include "runtime/records.h"
#include "cpu/cpu_isa.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/random_matrix.h"
#include "runtime/orthogonalize.h"
#include "support/cpu_peak.h"

namespace orthojit::cli {

const char* const kBenchHelp = R"(usage: orthojit bench --program NAME|FILE --shape MxN[xB] [options]
       orthojit bench --model CONFIG.json | --shape MxN[xB] --compare  [--program P] [--budget S]
                      [--precision P] [--per-head] [--threads T] [--plot FILE.png] [--json]

Times the program on a random Gaussian input (seed 1) and prints the median, p20 and p80 time
over the repeats, the achieved GFLOP/s and the fraction of this machine's peak.

GFLOP/s are dense-equivalent: the FLOPs of the standard strategy's products counted densely
(2·M·N·K each; 20·m²n + 10·m³ for a 5-step quintic), whatever strategy and triangular shortcuts
actually ran, so strategies compare by time. The peak is threads x measured clock x the FLOPs per
cycle that the engine of the products measured on this core: AMX tiles, the vdpbf16ps kernel, or
f32 FMAs (which bf16 and f16 operands widened to f32 run on too): docs/cpu-backend.md.

options:
  --program NAME|FILE   a shipped program or a .oj file
  --shape MxN[xB]       matrix shape, optionally a batch
  --backend B           auto (default: ref for --precision f64, else cpu), cpu, ref or cuda (cuda
                        times include the host copies; for device-side timing with events,
                        build/bin/orthojit_gpu_bench)
  --strategy S          auto (default), standard or gram
  --restarts LIST       gram restart steps
  --precision P         override the storage type: bf16, f16, f32 or f64 (ref)
  --isa I               cpu: generic, avx2, avx512f, avx512bf16 or amx
  --kernel K            cpu, bf16 products: fma (widened to f32), bf16dot (vdpbf16ps, avx512bf16 path)
                        or amx (AMX tiles); default: the tuning record's, else the path's default
                        (orthojit info names it and why)
  --threads T           cpu: worker threads, 1 to 1024 (default: one per logical core)
  --variant V           cuda: generated (default), 'generated BMxBNxBK/WMxWN', 'generated hopper' (sm_90a tile, CC 9.0), fused-small, cublas, cublaslt
  --repeat N            timed runs after one warm-up (default 7)
  --json                print one JSON object instead of the table

With --model (every distinct matrix shape of a Hugging Face config.json) or --compare, it times
standard Newton–Schulz, Gram Newton–Schulz and the vendor libraries (OpenBLAS, the standard
iteration with ssyrk, on the kernel orthojit chooses for this CPU; oneDNN's matmul for bf16/f16
storage) side by side in one run, with the tuner's harness (caches flushed, medians of repeats
within --budget seconds, default 60; the JIT compiles, and the three repeats each engine gets
however short its share, come on top), prints the speedups against the faster library and with
--plot draws them.
)";

int bench_command(const std::vector<std::string>& args) {
  for (const auto& arg : args)
    if (arg == "--model" || arg.rfind("--model=", 0) == 0 || arg == "--compare") return bench_model_command(args);
  Arguments arguments(args, {"program", "shape", "backend", "strategy", "restarts", "precision", "isa", "kernel", "threads", "repeat", "variant"}, {"json"});
  const dsl::Program program = kernels::load_program_by_name_or_path(arguments.require("program"));
  const runtime::ParsedShape shape = runtime::parse_shape(arguments.require("shape"));
  const runtime::OrthogonalizeOptions options = orthogonalize_options(arguments);
  const int repeat = parse_count(arguments.get("repeat").value_or("7"), "repeat");
  if (repeat < 1) throw runtime::UsageError("--repeat must be at least 1");
  const bool json = arguments.has("json");

  const nlohmann::json record = runtime::bench_record({&program, shape, options, repeat}, !json);
  if (json) {
    std::printf("%s\n", record.dump(2).c_str());
    return 0;
  }
  const double median = record["median_s"], p20 = record["p20_s"], p80 = record["p80_s"], gflops = record["gflops"];
  const double peak_gflops = record["peak_gflops"], gflop = record["dense_equivalent_gflop"], jit_s = record["jit_s"];
  std::printf("%-22s %-14s %-9s %-7s %10s %10s %10s %12s %8s\n", "program", "shape", "strategy", "storage", "median ms", "p20 ms", "p80 ms",
              "GFLOP/s*", "of peak");
  char shape_text[64];
  std::snprintf(shape_text, sizeof shape_text, "%lldx%lldx%lld", static_cast<long long>(shape.rows), static_cast<long long>(shape.cols),
                static_cast<long long>(shape.batch));
  std::printf("%-22s %-14s %-9s %-7s %10.2f %10.2f %10.2f %12.1f %7.1f%%\n", program.name.c_str(), shape_text, record["strategy"].get<std::string>().c_str(),
              record["storage"].get<std::string>().c_str(), median * 1e3, p20 * 1e3, p80 * 1e3, gflops, 100.0 * gflops / peak_gflops);
  std::printf("* dense-equivalent (%.2f GFLOP per call: the standard strategy's products, counted densely). JIT %.1f ms.\n", gflop, jit_s * 1e3);
  const std::string engine = record.value("engine", std::string("fma"));
  const char* ceiling = engine == "amx"       ? "fraction of the measured AMX-BF16 ceiling: the bf16 products ran on AMX tiles"
                        : engine == "bf16dot" ? "fraction of the measured vdpbf16ps ceiling: the bf16 products ran on the bf16 dot-product kernel"
                        : engine == "fma"     ? "fraction of the f32 FMA ceiling: the products ran on f32 FMAs"
                        : engine == "openblas" ? "fraction of the f32 FMA ceiling: the tuning record's winner runs the products in OpenBLAS (f32)"
                        : engine == "onednn"   ? "fraction of the best ceiling of the operands' type on this core: the tuning record's winner runs "
                                                 "the products in oneDNN's matmul"
                                               : "fraction of the nominal peak";
  std::printf("peak: %s (%s)\n", record["peak"].get<std::string>().c_str(), ceiling);
  return 0;
}

}  // namespace orthojit::cli
