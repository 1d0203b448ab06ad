// `orthojit compile`: lower a program for a shape and print the IR, after the last pass or any.
#include <cstdio>

#include <chrono>

#include "cli/arguments.h"
#include "cpu/bf16_engine.h"
#include "cpu/build_status.h"
#include "cpu/cpu_executable.h"
#include "cpu/kernel_cache.h"
#include "cli/commands.h"
#include "ir/printer.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "runtime/orthogonalize.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "kernels/cuda_device_headers.h"
#endif

namespace orthojit::cli {

const char* const kCompileHelp = R"(usage: orthojit compile --program NAME|FILE --shape MxN[xB] [options]

Lowers the program for one shape and prints its IR (the scheduled IR a backend consumes).

options:
  --program NAME|FILE   a shipped program or a .oj file
  --shape MxN[xB]       matrix shape, optionally a batch (e.g. 1024x4096 or 128x512x8)
  --emit ir|llvm|cuda|ptx
                        what to print: the scheduled IR; (--backend cpu) the optimized LLVM IR of
                        every microkernel the program uses, with the JIT compile time; (--backend
                        cuda) the generated CUDA C++ with its launch plan and ptxas's resource
                        report, or the PTX NVRTC makes of it. No GPU is needed for cuda and ptx.
  --dump-after PASS     print the IR after PASS instead ('all': after every pass; see --list-passes)
  --strategy S          standard (default) or gram
  --restarts LIST       gram restart steps, e.g. 2 or 2,4
  --precision P         override the storage type: bf16, f16, f32 or f64
  --backend B           ref (default), cpu or cuda
  --isa I               cpu: generic, avx2, avx512f, avx512bf16 or amx (default: amx where usable,
                        else the best this CPU runs; `orthojit info` says which and why)
  --arch A              cuda: the target, sm_80, sm_90, ... (default sm_90)
  --variant V           cuda: generated (default), 'generated BMxBNxBK/WMxWN', 'generated hopper' (sm_90a tile), fused-small
  --list-passes         list the passes in order and exit
)";

#ifdef ORTHOJIT_HAVE_CUDA
namespace {

// --emit cuda: the source, its launch plan and ptxas's report for `arch`; --emit ptx: NVRTC's PTX.
int emit_cuda(const ir::Function& function, const std::string& emit, const std::string& arch, const std::string& variant_text) {
  int sm = 0;
  if (std::sscanf(arch.c_str(), "sm_%d", &sm) != 1 || arch != "sm_" + std::to_string(sm) || sm < 80)
    throw runtime::UsageError("--arch '" + arch + "' is not a target the CUDA backend compiles for; expected sm_80, sm_86, sm_89, sm_90, ... (up to sm_" +
                              std::to_string(cuda::newest_supported_sm()) + " with this NVRTC)");
  if (sm > cuda::newest_supported_sm())
    throw runtime::UsageError("--arch " + arch + " is newer than this NVRTC (" + cuda::nvrtc_version() + ") supports; newest: sm_" +
                              std::to_string(cuda::newest_supported_sm()));
  cuda::CudaVariant variant;
  try {
    variant = cuda::CudaVariant::parse(variant_text);
  } catch (const std::invalid_argument& error) {
    throw runtime::UsageError(error.what());
  }
  if (variant.kind == cuda::CudaVariant::Kind::Cublas) throw runtime::UsageError("--variant cublas calls cuBLAS: it has no generated code to emit");
  if (variant.kind == cuda::CudaVariant::Kind::Cublaslt)
    throw runtime::UsageError("--variant cublaslt calls cuBLASLt: it has no generated code to emit (its call sequence is cuda::cublaslt_schedule_for)");
  // sm_80 allows 163 KiB of shared memory per block, sm_90 227 KiB (the fused kernel's budget).
  const int shared_limit = sm >= 90 ? 227 * 1024 : 163 * 1024;
  if (const std::string why = cuda::variant_unavailable_reason(function, variant, shared_limit); !why.empty())
    throw runtime::UsageError("--variant " + variant.label() + ": " + why);
  cuda::CudaProgram program;
  try {
    program = cuda::generate_variant(function, variant, shared_limit);
  } catch (const std::invalid_argument& error) {
    throw runtime::UsageError(error.what());
  }
  // The sm_90a tile's wgmma and setmaxnreg exist in the arch-specific target only.
  if (program.needs_sm90a() && sm != 90)
    throw runtime::UsageError("--variant " + variant.label() + " runs the sm_90a product tile: compile it with --arch sm_90 (compute capability 9.0 only)");
  const std::string target = program.compile_target(arch);
  if (emit == "ptx") {
    const cuda::NvrtcOutput ptx = cuda::compile_cuda(program.source, kernels::cuda_device_headers(), program.needs_sm90a() ? "compute_90a" : "compute_" + std::to_string(sm));
    // NVRTC's PTX ends with its C-string terminator; print the text only.
    size_t length = ptx.image.size();
    while (length > 0 && ptx.image[length - 1] == '\0') --length;
    std::fwrite(ptx.image.data(), 1, length, stdout);
    return 0;
  }
  std::printf("%s", program.source.c_str());
  const auto start = std::chrono::steady_clock::now();
  const cuda::NvrtcOutput cubin = cuda::compile_cuda(program.source, kernels::cuda_device_headers(), target);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("// ---- launch plan (%s, %zu launch%s, workspace %lld bytes) ----\n", variant.label().c_str(), program.launches.size(),
              program.launches.size() == 1 ? "" : "es",
              static_cast<long long>([&] {
                int64_t total = program.norm_partials_bytes;
                for (int64_t bytes : program.buffer_bytes) total += bytes;
                return total;
              }()));
  for (const cuda::Launch& launch : program.launches) {
    const auto found = cubin.resources.find(launch.kernel);
    // A persistent launch's grid[0] counts its work items; the CTAs are one wave of them on the device.
    std::printf("// %-28s %s %lldx%lldx%lld block %d smem %d+%d  %s", launch.kernel.c_str(), launch.persistent ? "items" : "grid", static_cast<long long>(launch.grid[0]),
                static_cast<long long>(launch.grid[1]), static_cast<long long>(launch.grid[2]), launch.block, launch.shared_bytes, launch.dynamic_shared_bytes,
                launch.summary.c_str());
    if (found != cubin.resources.end())
      std::printf("  [%s: %d registers, %d B spill stores, %d B spill loads]", target.c_str(), found->second.registers, found->second.spill_store_bytes,
                  found->second.spill_load_bytes);
    std::printf("\n");
  }
  std::printf("// NVRTC %s compiled it for %s in %.2f s\n", cuda::nvrtc_version().c_str(), target.c_str(), seconds);
  return 0;
}

}  // namespace
#endif

int compile_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"program", "shape", "emit", "dump-after", "strategy", "restarts", "precision", "backend", "isa", "arch", "variant"}, {"list-passes"});
  const auto& passes = passes::pass_list();
  if (arguments.has("list-passes")) {
    for (const auto& pass : passes) std::printf("%-26s %s\n", pass.name.c_str(), pass.summary.c_str());
    return 0;
  }
  const std::string emit = arguments.get("emit").value_or("ir");
  const std::string backend = arguments.get("backend").value_or("ref");
#ifdef ORTHOJIT_HAVE_CUDA
  const bool have_cuda = true;
#else
  const bool have_cuda = false;
#endif
  if (backend != "ref" && backend != "cpu" && !(backend == "cuda" && have_cuda))
    throw runtime::UsageError("backend '" + backend + "' is not available in this build; available: ref, cpu" + (have_cuda ? ", cuda" : ""));
  if (emit != "ir" && emit != "llvm" && emit != "cuda" && emit != "ptx") throw runtime::UsageError("unknown --emit '" + emit + "'; expected ir, llvm, cuda or ptx");
  if (emit == "llvm" && backend != "cpu") throw runtime::UsageError("--emit llvm is the CPU backend's code: add --backend cpu");
  // The IR needs no backend; the LLVM IR needs the CPU backend's code generator.
  if (emit == "llvm" && !cpu::cpu_backend_unavailable_reason().empty()) throw runtime::UsageError("--emit llvm: " + cpu::cpu_backend_unavailable_reason());
  if ((emit == "cuda" || emit == "ptx") && backend != "cuda") throw runtime::UsageError("--emit " + emit + " is the CUDA backend's code: add --backend cuda");
  if ((arguments.get("arch") || arguments.get("variant")) && backend != "cuda") throw runtime::UsageError("--arch and --variant are options of --backend cuda");
  cpu::CpuOptions cpu_options;
  if (auto isa = arguments.get("isa")) {
    auto parsed = cpu::parse_cpu_isa(*isa);
    if (!parsed) throw runtime::UsageError("unknown ISA '" + *isa + "'; expected generic, avx2, avx512f, avx512bf16 or amx");
    if (!cpu::host_supports(*parsed)) throw runtime::UsageError("this CPU cannot run the " + *isa + " code path");
    cpu_options.isa = *parsed;
  }
  // The kernels an untuned run uses on this path: the vdpbf16ps kernel where it is the default.
  cpu_options.blocking.bf16_dot = cpu::default_bf16_engine(cpu_options.isa) == cpu::Bf16Engine::Bf16Dot;
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
  const runtime::ParsedShape shape = runtime::parse_shape(arguments.require("shape"));
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
#ifdef ORTHOJIT_HAVE_CUDA
  if (emit == "cuda" || emit == "ptx") return emit_cuda(function, emit, arguments.get("arch").value_or("sm_90"), arguments.get("variant").value_or("generated"));
#endif
  if (dump_after.empty()) std::printf("%s", ir::print_function(function).c_str());
  return 0;
}

}  // namespace orthojit::cli
