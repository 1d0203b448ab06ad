// The engines of bf16 products and the measured choice between them.
#include "cpu/bf16_engine.h"

#include <cstdio>

#include "support/cpu_peak.h"
#include "support/host_cpu.h"

namespace orthojit::cpu {

std::string_view to_string(Bf16Engine engine) {
  switch (engine) {
    case Bf16Engine::Fma: return "fma";
    case Bf16Engine::Bf16Dot: return "bf16dot";
    case Bf16Engine::Amx: return "amx";
  }
  return "?";
}

std::optional<Bf16Engine> parse_bf16_engine(std::string_view text) {
  for (Bf16Engine engine : {Bf16Engine::Fma, Bf16Engine::Bf16Dot, Bf16Engine::Amx})
    if (text == to_string(engine)) return engine;
  return std::nullopt;
}

CpuIsa isa_for(Bf16Engine engine) {
  switch (engine) {
    case Bf16Engine::Amx: return CpuIsa::AmxBf16;
    case Bf16Engine::Bf16Dot: return CpuIsa::Avx512Bf16;
    case Bf16Engine::Fma: break;
  }
  const CpuIsa best = best_host_isa();
  return best == CpuIsa::AmxBf16 ? CpuIsa::Avx512Bf16 : best;
}

const Bf16DotRates& bf16_dot_rates() {
  static const Bf16DotRates rates = [] {
    Bf16DotRates measured;
    if (!host_supports(CpuIsa::Avx512Bf16)) return measured;
    // Both at a nominal 1 GHz: the clock cancels in the ratio, and measuring it costs 50 ms more.
    measured.f32_fma_flops_per_cycle = measure_f32_fma_flops_per_cycle(1.0, 16);
    measured.bf16_dot_flops_per_cycle = measure_bf16_dot_flops_per_cycle(1.0);
    return measured;
  }();
  return rates;
}

Bf16Engine default_bf16_engine(CpuIsa isa) {
  if (isa == CpuIsa::AmxBf16) return Bf16Engine::Amx;
  if (isa == CpuIsa::Avx512Bf16 && bf16_dot_rates().ratio() >= kBf16DotPreferredRatio) return Bf16Engine::Bf16Dot;
  return Bf16Engine::Fma;
}

std::string describe_default_bf16_engine() {
  const CpuIsa isa = best_host_isa();
  const Bf16Engine engine = default_bf16_engine(isa);
  std::string text = std::string(to_string(engine));
  if (engine == Bf16Engine::Amx) return text + " (AMX tiles on the amx path)";
  if (!host_supports(CpuIsa::Avx512Bf16)) return text + " (no AVX512-BF16: bf16 operands widened to f32)";
  char ratio[160];
  std::snprintf(ratio, sizeof ratio, " (vdpbf16ps measured %.2fx the FLOP rate of f32 FMAs; the vdpbf16ps kernel is the default from %.2fx%s)",
                bf16_dot_rates().ratio(), kBf16DotPreferredRatio, isa == CpuIsa::Avx512Bf16 ? "" : ", on the avx512bf16 path");
  return text + ratio;
}

}  // namespace orthojit::cpu
