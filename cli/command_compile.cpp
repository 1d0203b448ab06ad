// `orthojit compile`: lower a program for a shape and print the IR, after the last pass or any.
#include <cstdio>

#include <chrono>

#include "cli/arguments.h"
#include "cpu/cpu_executable.h"
#include "cpu/kernel_cache.h"
#include "cli/commands.h"
#include "ir/printer.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"

namespace orthojit::cli {

const char* const kCompileHelp = R"(usage: orthojit compile --program NAME|FILE --shape MxN[xB] [options]

Lowers the program for one shape and prints its IR (the scheduled IR a backend consumes).

options:
  --program NAME|FILE   a shipped program or a .oj file
  --shape MxN[xB]       matrix shape, optionally a batch (e.g. 1024x4096 or 128x512x8)
  --emit ir|llvm        what to print: the scheduled IR, or (--backend cpu) the optimized LLVM IR of
                        every microkernel the program uses, with the JIT compile time
                        (cuda and ptx arrive with the CUDA backend)
  --dump-after PASS     print the IR after PASS instead ('all': after every pass; see --list-passes)
  --strategy S          standard (default) or gram
  --restarts LIST       gram restart steps, e.g. 2 or 2,4
  --precision P         override the storage type: bf16, f16, f32 or f64
  --backend B           ref (default) or cpu
  --isa I               cpu: generic, avx2, avx512f or avx512bf16 (default: the best this CPU runs)
  --list-passes         list the passes in order and exit
)";

int compile_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"program", "shape", "emit", "dump-after", "strategy", "restarts", "precision", "backend", "isa"}, {"list-passes"});
  const auto& passes = passes::pass_list();
  if (arguments.has("list-passes")) {
    for (const auto& pass : passes) std::printf("%-26s %s\n", pass.name.c_str(), pass.summary.c_str());
    return 0;
  }
  const std::string emit = arguments.get("emit").value_or("ir");
  const std::string backend = arguments.get("backend").value_or("ref");
  if (backend != "ref" && backend != "cpu") throw runtime::UsageError("backend '" + backend + "' is not available in this build; available: ref, cpu");
  if (emit == "cuda" || emit == "ptx") throw runtime::UsageError("--emit " + emit + " needs the CUDA backend, which this build does not have yet; available: ir, llvm");
  if (emit != "ir" && emit != "llvm") throw runtime::UsageError("unknown --emit '" + emit + "'; expected ir or llvm");
  if (emit == "llvm" && backend != "cpu") throw runtime::UsageError("--emit llvm is the CPU backend's code: add --backend cpu");
  cpu::CpuOptions cpu_options;
  if (auto isa = arguments.get("isa")) {
    auto parsed = cpu::parse_cpu_isa(*isa);
    if (!parsed) throw runtime::UsageError("unknown ISA '" + *isa + "'; expected generic, avx2, avx512f or avx512bf16");
    if (!cpu::host_supports(*parsed)) throw runtime::UsageError("this CPU cannot run the " + *isa + " code path");
    cpu_options.isa = *parsed;
  }
  std::string dump_after = arguments.get("dump-after").value_or("");
  if (!dump_after.empty() && dump_after != "all") {
    bool known = false;
    std::string names;
    for (const auto& pass : passes) {
      known |= pass.name == dump_after;
      names += " " + pass.name;
    }
    if (!known) throw runtime::UsageError("unknown pass '" + dump_after + "' for --dump-after; passes:" + names + " (or all)");
  }
  const dsl::Program program = kernels::load_program_by_name_or_path(arguments.require("program"));
  const ParsedShape shape = parse_shape(arguments.require("shape"));
  passes::CompileOptions options;
  options.rows = shape.rows;
  options.cols = shape.cols;
  options.batch = shape.batch;
  const std::string strategy = arguments.get("strategy").value_or("standard");
  auto kind = ir::parse_strategy(strategy);
  if (!kind) throw runtime::UsageError("unknown strategy '" + strategy + "'; expected standard or gram");
  options.strategy = *kind;
  if (auto restarts = arguments.get("restarts")) options.gram_restarts = parse_int_list(*restarts, "restarts");
  if (auto precision = arguments.get("precision")) {
    options.precision = parse_scalar_type(*precision);
    if (!options.precision) throw runtime::UsageError("unknown precision '" + *precision + "'; expected bf16, f16, f32 or f64");
  }
  const ir::Function function = passes::compile_program(program, options, [&](const std::string& pass, const ir::Function& after) {
    if (dump_after == "all" || dump_after == pass) std::printf("; ---- IR after %s ----\n%s\n", pass.c_str(), ir::print_function(after).c_str());
  });
  if (emit == "llvm") {
    const auto start = std::chrono::steady_clock::now();
    cpu::CpuExecutable executable(function, cpu_options);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& spec : executable.microkernels()) std::printf("%s\n", cpu::microkernel_ir(spec).c_str());
    for (const auto& spec : executable.epilogues()) std::printf("%s\n", cpu::epilogue_ir(spec).c_str());
    std::printf("; %zu microkernel(s) and %zu epilogue(s) for %s, JIT-compiled in %.1f ms (LLVM ORC, O3)\n", executable.microkernels().size(),
                executable.epilogues().size(), std::string(cpu::to_string(cpu_options.isa)).c_str(), seconds * 1e3);
    return 0;
  }
  if (dump_after.empty()) std::printf("%s", ir::print_function(function).c_str());
  return 0;
}

}  // namespace orthojit::cli
