// The CPU instruction-set paths the backend generates code for, and the register-blocking shape
// of the microkernel on each (MR rows broadcast from packed A, NR columns loaded from packed B).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace orthojit::cpu {

enum class CpuIsa { Generic, Avx2Fma, Avx512f, Avx512Bf16 };

std::string_view to_string(CpuIsa isa);
std::optional<CpuIsa> parse_cpu_isa(std::string_view text);  // "generic", "avx2", "avx512f", "avx512bf16"

// Whether this machine runs code for `isa` (cpuid + the OS's saved-state mask).
bool host_supports(CpuIsa isa);
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
IsaTraits traits_of(CpuIsa isa);

}  // namespace orthojit::cpu
