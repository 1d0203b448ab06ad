// This machine's arithmetic peak, for "fraction of peak" in `orthojit bench`:
//   peak = cores x measured clock x FLOPs per cycle per core of the ISA path.
// The clock is measured, not read from /proc (which shows the base or a stale value on VMs): a
// chain of dependent register-register adds retires one per cycle on x86 cores, so adds per second
// is the clock the code really runs at (with turbo). FLOPs per cycle assume two
// FMA pipes per core, true of the server and desktop AVX2/AVX-512 parts since Haswell/Zen 4:
// f32: 2 pipes x lanes x 2 (multiply + add). The CPU backend runs bf16 policies on the same f32
// FMAs (operands widened while packing), so this is their peak too. The bf16 dot-product figure
// (vdpbf16ps: 2 pairs per lane) is the instruction's nominal rate: 2x f32 if it had two pipes;
// measured at 1/2 of the f32 rate on the development machine (bench/RESULTS.md).
#pragma once

#include <string>

namespace orthojit {

double measure_clock_ghz();  // about 50 ms of one core

// The rate vdpbf16ps really retires on this core: 24 independent accumulator chains in registers
// (no memory operands), FLOPs per cycle at the measured clock (4 FLOPs per lane: two products,
// two adds). The ceiling of any bf16 dot-product kernel on this CPU, which the nominal figure is
// not: the development machine retires it at 1/4 of nominal (bench/RESULTS.md). Call only where
// the CPU has AVX512-BF16 (cpu::host_supports); about 30 ms.
double measure_bf16_dot_flops_per_cycle(double clock_ghz);

// The rate TDPBF16PS really retires on this core: 4 independent 16x16 f32 accumulator tiles
// (tmm0-3) fed by 2 A and 2 B tiles loaded once (no memory operands in the loop), FLOPs per cycle
// at the measured clock (16·16·32 multiply-adds = 16384 FLOPs per instruction; nominal 1024 per
// cycle: one TDPBF16PS every 16 cycles, Intel Optimization Manual, AMX chapter). The ceiling of the
// AMX kernels. Returns 0 where this process may not use AMX (support/host_cpu.h); about 30 ms.
double measure_amx_bf16_flops_per_cycle(double clock_ghz);

struct PeakEstimate {
  double clock_ghz = 0;
  int cores = 1;
  double f32_flops_per_cycle = 0;   // per core
  double bf16_flops_per_cycle = 0;  // per core, nominal (0 when the ISA has no bf16 dot product)
  double bf16_measured_flops_per_cycle = 0;  // per core, measure_bf16_dot_flops_per_cycle
  double amx_flops_per_cycle = 0;            // per core, nominal (0 without the amx path)
  double amx_measured_flops_per_cycle = 0;   // per core, measure_amx_bf16_flops_per_cycle
  double amx_gflops() const { return clock_ghz * cores * amx_measured_flops_per_cycle; }
  double bf16_dot_gflops() const { return clock_ghz * cores * bf16_measured_flops_per_cycle; }
  double f32_gflops() const { return clock_ghz * cores * f32_flops_per_cycle; }
  double bf16_gflops() const { return clock_ghz * cores * bf16_flops_per_cycle; }
  std::string describe() const;
};

// `isa`: "generic", "avx2", "avx512f", "avx512bf16" or "amx" (a path this CPU runs; amx measures
// both bf16 ceilings); `cores`: the threads
// the run uses.
PeakEstimate estimate_peak(const std::string& isa, int cores);

}  // namespace orthojit
