// This machine's arithmetic ceilings, for "fraction of peak" in `orthojit bench`:
//   ceiling = cores x measured clock x FLOPs per cycle per core that the engine's instruction
//   really retires here (measured, in registers, no memory operands).
// The clock is measured, not read from /proc (which shows the base or a stale value on VMs): a
// chain of dependent register-register adds retires one per cycle on x86 cores, so adds per second
// is the clock the code really runs at (with turbo). The FLOPs per cycle are measured too, since
// the nominal figures differ between cores of the same ISA: AVX-512 f32 FMAs retire 64 FLOP per
// cycle on Sapphire Rapids (two 512-bit pipes) but 32 on Zen 4 (two 256-bit pipes, a zmm
// instruction taking both); vdpbf16ps retires at half the f32 FMA rate on Sapphire Rapids and at
// twice it on Zen 4 (bench/RESULTS.md). The nominal figure (two pipes x lanes x 2) is kept for
// the description.
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

// The rate f32 FMAs (vfmadd231ps) of `lanes` (16: zmm, 8: ymm) really retire on this core, the
// same way (24 independent chains in registers). 0 where the CPU lacks the vector width or for
// other lane counts; about 10 ms.
double measure_f32_fma_flops_per_cycle(double clock_ghz, int lanes);

// The rate TDPBF16PS really retires on this core: 4 independent 16x16 f32 accumulator tiles
// (tmm0-3) fed by 2 A and 2 B tiles loaded once (no memory operands in the loop), FLOPs per cycle
// at the measured clock (16·16·32 multiply-adds = 16384 FLOPs per instruction; nominal 1024 per
// cycle: one TDPBF16PS every 16 cycles, Intel Optimization Manual, AMX chapter). The ceiling of the
// AMX kernels. Returns 0 where this process may not use AMX (support/host_cpu.h); about 30 ms.
double measure_amx_bf16_flops_per_cycle(double clock_ghz);

struct PeakEstimate {
  double clock_ghz = 0;
  int cores = 1;
  double f32_flops_per_cycle = 0;   // per core, nominal: two FMA pipes x lanes x 2
  double f32_measured_flops_per_cycle = 0;  // per core, measure_f32_fma_flops_per_cycle (0: not measured)
  double bf16_flops_per_cycle = 0;  // per core, nominal (0 when the ISA has no bf16 dot product)
  double bf16_measured_flops_per_cycle = 0;  // per core, measure_bf16_dot_flops_per_cycle
  double amx_flops_per_cycle = 0;            // per core, nominal (0 without the amx path)
  double amx_measured_flops_per_cycle = 0;   // per core, measure_amx_bf16_flops_per_cycle
  double amx_gflops() const { return clock_ghz * cores * amx_measured_flops_per_cycle; }
  double bf16_dot_gflops() const { return clock_ghz * cores * bf16_measured_flops_per_cycle; }
  // The measured f32 rate where there is one, else the nominal.
  double f32_gflops() const { return clock_ghz * cores * (f32_measured_flops_per_cycle > 0 ? f32_measured_flops_per_cycle : f32_flops_per_cycle); }
  double bf16_gflops() const { return clock_ghz * cores * bf16_flops_per_cycle; }
  std::string describe() const;
};

// `isa`: "generic", "avx2", "avx512f", "avx512bf16" or "amx" (a path this CPU runs; amx measures
// both bf16 ceilings); `cores`: the threads
// the run uses.
PeakEstimate estimate_peak(const std::string& isa, int cores);

}  // namespace orthojit
