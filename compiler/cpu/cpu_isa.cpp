// CPU ISA paths.
#include "cpu/cpu_isa.h"

#include <cstdio>
#include <cstdlib>

#include "cpu/amx_self_check.h"
#include "support/host_cpu.h"

namespace orthojit::cpu {

std::string_view to_string(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Generic: return "generic";
    case CpuIsa::Avx2Fma: return "avx2";
    case CpuIsa::Avx512f: return "avx512f";
    case CpuIsa::Avx512Bf16: return "avx512bf16";
    case CpuIsa::AmxBf16: return "amx";
  }
  return "?";
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view text) {
  for (CpuIsa isa : {CpuIsa::Generic, CpuIsa::Avx2Fma, CpuIsa::Avx512f, CpuIsa::Avx512Bf16, CpuIsa::AmxBf16})
    if (text == to_string(isa)) return isa;
  return std::nullopt;
}

bool host_executes(CpuIsa isa) {
  const HostCpu& cpu = host_cpu();
  switch (isa) {
    case CpuIsa::Generic: return true;
    case CpuIsa::Avx2Fma: return cpu.avx2 && cpu.fma;
    case CpuIsa::Avx512f: return cpu.avx512f && cpu.avx2 && cpu.fma;
    case CpuIsa::Avx512Bf16: return cpu.avx512f && cpu.avx512bf16;
    case CpuIsa::AmxBf16: return cpu.avx512f && cpu.avx512bf16 && amx_availability().usable;
  }
  return false;
}

bool host_supports(CpuIsa isa) {
  if (!host_executes(isa)) return false;
  return isa != CpuIsa::AmxBf16 || amx_self_check().bf16_passed;
}

std::string unsupported_reason(CpuIsa isa) {
  if (host_supports(isa)) return "";
  if (isa == CpuIsa::AmxBf16) {
    if (host_executes(isa)) return amx_self_check().detail;
    return amx_availability().usable ? "no AVX512-BF16" : amx_availability().reason;
  }
  return "this CPU lacks the " + std::string(to_string(isa)) + " instructions (or the OS does not save their registers)";
}

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::Generic, CpuIsa::Avx2Fma, CpuIsa::Avx512f, CpuIsa::Avx512Bf16, CpuIsa::AmxBf16})
    if (host_supports(isa)) isas.push_back(isa);
  return isas;
}

CpuIsa best_host_isa() {
  static const CpuIsa chosen = [] {
    const CpuIsa strongest = supported_isas().back();
    const char* text = std::getenv("ORTHOJIT_CPU_ISA");
    if (!text || !*text) return strongest;
    const std::optional<CpuIsa> forced = parse_cpu_isa(text);
    if (forced && host_supports(*forced)) return *forced;
    std::fprintf(stderr, "orthojit: ORTHOJIT_CPU_ISA='%s' ignored: %s; using %s\n", text,
                 forced ? unsupported_reason(*forced).c_str() : "expected generic, avx2, avx512f, avx512bf16 or amx",
                 std::string(to_string(strongest)).c_str());
    return strongest;
  }();
  return chosen;
}

IsaTraits traits_of(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Generic: return {4, 4, 8, false, "x86-64", ""};
    case CpuIsa::Avx2Fma: return {8, 6, 16, true, "x86-64-v3", ""};
    case CpuIsa::Avx512f: return {16, 12, 32, true, "x86-64-v4", ""};
    case CpuIsa::Avx512Bf16: return {16, 12, 32, true, "", ""};
    case CpuIsa::AmxBf16: return {16, 12, 32, true, "", ""};
  }
  return {4, 4, 8, false, "x86-64", ""};
}

}  // namespace orthojit::cpu
