// Which unit the bf16 x bf16 products of a bf16-storage program run on, and which one a machine
// gets when nobody chose: the tuner's search axis "kernels", the CLI's --kernel, the runtime's
// untuned default and the engine `bench` reports its fraction of the ceiling against.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cpu/cpu_isa.h"

namespace orthojit::cpu {

enum class Bf16Engine {
  Fma,      // operands widened to f32 while packing, f32 FMA microkernel (every x86 path)
  Bf16Dot,  // vdpbf16ps on operands packed as bf16 pairs along k (the avx512bf16 path)
  Amx,      // TDPBF16PS on AMX tiles (the amx path)
};

std::string_view to_string(Bf16Engine engine);              // "fma", "bf16dot", "amx"
std::optional<Bf16Engine> parse_bf16_engine(std::string_view text);

// The ISA path an engine needs on this machine: amx -> amx, bf16dot -> avx512bf16, fma -> the
// default path without its AMX products.
CpuIsa isa_for(Bf16Engine engine);

// The engine bf16 x bf16 products run on, on path `isa` with the vdpbf16ps kernel enabled or not
// (GemmBlocking::bf16_dot): the driver's own rule (uses_amx, uses_bf16_dot in gemm_driver.h).
inline Bf16Engine engine_on(CpuIsa isa, bool bf16_dot) {
  if (isa == CpuIsa::AmxBf16) return Bf16Engine::Amx;
  return isa == CpuIsa::Avx512Bf16 && bf16_dot ? Bf16Engine::Bf16Dot : Bf16Engine::Fma;
}

// The measured rates behind the default (per core, same clock, so only their ratio matters).
struct Bf16DotRates {
  double bf16_dot_flops_per_cycle = 0;  // vdpbf16ps zmm
  double f32_fma_flops_per_cycle = 0;   // vfmadd231ps zmm
  double ratio() const { return f32_fma_flops_per_cycle > 0 ? bf16_dot_flops_per_cycle / f32_fma_flops_per_cycle : 0; }
};
// Measured once per process (about 20 ms) where the CPU has AVX512-BF16; zeros elsewhere.
const Bf16DotRates& bf16_dot_rates();

// The default takes the vdpbf16ps kernel where the instruction retires at least this multiple of
// the f32 FMA's FLOP rate. Measured: Zen 4 2.0 (its GEMM runs 1.7x the FMA one), Sapphire Rapids
// 0.5 (half; bench/RESULTS.md). The margin above 1 keeps a noisy reading from switching engines
// on a core where the two are close.
inline constexpr double kBf16DotPreferredRatio = 1.25;

// The engine of bf16 products on path `isa` when neither a tuning record nor the caller chose:
// amx on the amx path; on avx512bf16 the vdpbf16ps kernel where bf16_dot_rates() says it retires
// at least kBf16DotPreferredRatio x the f32 FMA rate; fma otherwise.
Bf16Engine default_bf16_engine(CpuIsa isa);
// One line for `orthojit info`: the default engine on the default path and why.
std::string describe_default_bf16_engine();

}  // namespace orthojit::cpu
