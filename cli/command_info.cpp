// `orthojit info`: version, backends, host CPU, cache directory, shipped programs.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "autotune/record_lookup.h"
#include "cli/arguments.h"
#include "cli/commands.h"
#include "runtime/records.h"
#include "cpu/amx_self_check.h"
#include "cpu/build_status.h"
#include "cpu/bf16_engine.h"
#include "cpu/cpu_isa.h"
#include "dsl/coefficient_sets.h"
#include "kernels/program_library.h"
#include "runtime/build_parts.h"
#include "runtime/orthogonalize.h"
#include "support/host_cpu.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"
#include "cuda/sm90a_switch.h"
#endif

namespace orthojit::cli {

const char* const kInfoHelp = R"(usage: orthojit info [--json]

Prints the version, the backends of this build, the parts it was built with (and, for each part
left out at configure time, why: a build without LLVM 19 has no cpu backend, one without MPI no
mpi engine), the host CPU's features, the cache directory, this device's tuning records (where,
how many, and whether they apply to this machine) and the shipped programs with their precision
and step count.

  --json                the same as one JSON document ("parts": [{name, built, detail}], ...)
)";


int info_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {}, {"json"});
  if (arguments.has("json")) {
    std::printf("%s\n", runtime::info_record().dump(2).c_str());
    return 0;
  }
  const HostCpu& cpu = host_cpu();
  std::printf("orthojit %s\n", ORTHOJIT_VERSION);
  std::string backends;
  for (const auto& name : runtime::available_backends()) backends += (backends.empty() ? "" : ", ") + name;
  std::printf("backends:   %s\n", backends.c_str());
  if (const std::string why = runtime::cuda_backend_unavailable_reason(); !why.empty()) std::printf("cuda:       unavailable: %s\n", why.c_str());
#ifdef ORTHOJIT_HAVE_CUDA
  else std::printf("cuda:       %s\n", cuda::Device::get().info().describe().c_str());
  std::printf("nvrtc:      %s (cubins up to sm_%d; the CUDA program cache is <cache dir>/cuda)\n", cuda::nvrtc_version().c_str(), cuda::newest_supported_sm());
  if (const std::string off = cuda::sm90a_disabled_reason(); !off.empty())
    std::printf("sm_90a:     off (%s): no kernel on the wgmma/TMA product tile is chosen, tuned or run\n", off.c_str());
#endif
  // The parts of this build (cmake/optional_parts.cmake), built ones first.
  bool first = true;
  for (bool built : {true, false})
    for (const runtime::BuildPart& part : runtime::build_parts())
      if (part.built == built) {
        std::printf("%-12s%-18s %s%s\n", first ? "parts:" : "", part.name.c_str(), built ? "" : "NOT BUILT: ", part.detail.c_str());
        first = false;
      }
  std::printf("host cpu:   %s, %d logical cores\n", cpu.model.empty() ? "(unknown model)" : cpu.model.c_str(), cpu.logical_cores);
  std::printf("isa:        avx2=%s fma=%s f16c=%s avx512f=%s avx512bf16=%s -> %s\n", cpu.avx2 ? "yes" : "no", cpu.fma ? "yes" : "no",
              cpu.f16c ? "yes" : "no", cpu.avx512f ? "yes" : "no", cpu.avx512bf16 ? "yes" : "no", cpu.best_isa().c_str());
  if (cpu::cpu_backend_unavailable_reason().empty()) {
    std::string paths;
    for (cpu::CpuIsa isa : cpu::supported_isas()) paths += (paths.empty() ? "" : ", ") + std::string(cpu::to_string(isa));
    std::printf("cpu paths:  %s (default %s; --isa to force one)\n", paths.c_str(), std::string(cpu::to_string(cpu::best_host_isa())).c_str());
  }
  // AMX: CPUID, XCR0 and the OS's answer to the tile-data permission request (support/host_cpu.h).
  if (cpu::host_supports(cpu::CpuIsa::AmxBf16))
    std::printf("amx:        usable (%s; %s): bf16 products on AMX tiles with --isa amx%s; f16 products %s\n", amx_availability().reason.c_str(),
                cpu::amx_self_check().detail.c_str(), cpu::best_host_isa() == cpu::CpuIsa::AmxBf16 ? ", the default" : "",
                cpu::amx_fp16_usable() ? "too (AMX-FP16)" : cpu.amx_fp16 ? "on FMAs (the AMX-FP16 kernels failed their self-check)" : "on FMAs (no AMX-FP16 on this CPU)");
  else
    std::printf("amx:        not usable: %s\n", cpu::unsupported_reason(cpu::CpuIsa::AmxBf16).c_str());
  if (cpu::cpu_backend_unavailable_reason().empty())
    std::printf("bf16 kernel: %s; --kernel to force one\n", cpu::describe_default_bf16_engine().c_str());
  std::printf("cache dir:  %s\n", runtime::cache_directory().c_str());
  std::printf("tuning:     %s\n", autotune::describe_tuning_records().c_str());
  std::printf("\nshipped programs:\n");
  std::printf("  %-22s %-8s %-6s %-s\n", "name", "storage", "steps", "coefficients");
  for (const auto& shipped : kernels::shipped_programs()) {
    const dsl::Program program = kernels::load_program_by_name_or_path(std::string(shipped.name));
    std::string coefficients = program.coefficient_set.empty() ? "custom" : program.coefficient_set;
    if (program.coefficient_safety != 1.0) coefficients += " scaled " + std::to_string(program.coefficient_safety).substr(0, 4);
    std::printf("  %-22s %-8s %-6zu %s\n", program.name.c_str(), std::string(to_string(program.policy.storage)).c_str(), program.steps.size(),
                coefficients.c_str());
  }
  return 0;
}

}  // namespace orthojit::cli
