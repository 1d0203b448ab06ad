// The CPU instruction-set paths the backend generates code for, and the register-blocking shape
// of the microkernel on each (MR rows broadcast from packed A, NR columns loaded from packed B).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace orthojit::cpu {

// AmxBf16 ("amx"): the avx512bf16 path whose bf16 x bf16 products run on the AMX tile unit
// (amx_codegen.h); every other product, the epilogues and the f32 policies stay on AVX-512 FMAs.
enum class CpuIsa { Generic, Avx2Fma, Avx512f, Avx512Bf16, AmxBf16 };

std::string_view to_string(CpuIsa isa);
std::optional<CpuIsa> parse_cpu_isa(std::string_view text);  // "generic", "avx2", "avx512f", "avx512bf16", "amx"

// Whether this machine executes the instructions of `isa` (cpuid + the OS's saved-state mask; for
// amx also the process's tile-data permission, requested on the first call: support/host_cpu.h).
bool host_executes(CpuIsa isa);
// Whether the backend runs `isa` here: host_executes, and for amx also the tile kernels' self-check
// (amx_self_check.h, run on the first call where AMX executes).
bool host_supports(CpuIsa isa);
// Why `isa` is not runnable here ("" when it is).
std::string unsupported_reason(CpuIsa isa);
// The default path: ORTHOJIT_CPU_ISA when it names a path this machine runs (otherwise a warning
// on stderr, once, and the strongest path), else the strongest path (amx where AMX is usable).
CpuIsa best_host_isa();
std::vector<CpuIsa> supported_isas();  // every path this machine runs, weakest first

struct IsaTraits {
  int vector_width;   // f32 lanes per vector register
  int mr;             // microkernel rows (broadcasts from packed A)
  int nr;             // microkernel columns (a multiple of vector_width)
  bool fused_fma;     // llvm.fma (one rounding) vs llvm.fmuladd on the generic path
  std::string cpu;    // LLVM CPU name ("" = the host's)
  std::string features;  // LLVM feature string added to the CPU's ("" = the host's)
};
// Register budget: MR·NR/W accumulators + NR/W B vectors + 1 broadcast must fit the register
// file (16 xmm/ymm, 32 zmm): generic 4x8 (10 regs), AVX2 6x16 (14), AVX-512 12x32 (26).
IsaTraits traits_of(CpuIsa isa);  // amx: avx512bf16's (the FMA kernels it keeps)

}  // namespace orthojit::cpu
