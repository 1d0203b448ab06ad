// Clock measurement and peak FLOP rate.
#include "support/cpu_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "support/host_cpu.h"

namespace orthojit {
namespace {
volatile uint64_t benchmark_sink;
}

double measure_clock_ghz() {
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    uint64_t value = 1;
    const uint64_t iterations = 2'000'000;
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < iterations; ++i) {
#if defined(__x86_64__)
      // 16 dependent adds: the chain is 16 cycles per iteration; the loop counter runs in parallel.
      // add reg, reg (doubling): recent cores fold chains of add-immediate in the renamer, but
      // not this; it is one cycle of latency everywhere.
      asm volatile(
          "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
          "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
          "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
          "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
          : "+r"(value));
#else
      value += 16;
#endif
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark_sink = value;
    best = std::max(best, 16.0 * static_cast<double>(iterations) / seconds * 1e-9);
  }
  return best;
}

#if defined(__x86_64__)
namespace {
// 24 accumulators: more than latency x pipes of any x86 core's FMA or dot-product unit (Zen 4:
// 4-6 cycles x 2 pipes; Sapphire Rapids: 4 x 2), so the loop measures throughput. In inline
// assembly with named registers because a compiler may keep an array of accumulators in memory:
// the intrinsics version did (one load and one store per instruction; it measured half of what
// the bf16 microkernel itself reaches on Zen 4).
#define OJ_REPEAT24(op)                                                                                                       \
  op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11) op(12) op(13) op(14) op(15) op(16) op(17) op(18) \
      op(19) op(20) op(21) op(22) op(23)
#define OJ_DPBF16(n) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #n "\n\t"
#define OJ_FMA512(n) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #n "\n\t"
#define OJ_FMA256(n) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #n "\n\t"
#define OJ_CLOBBER_ZMM(n) "xmm" #n,

// `iterations` passes of 24 instructions `op` on the accumulators zmm0-23, operands zmm30 and
// zmm31 zeroed (no denormals, no overflow: the values never change).
#define OJ_ZMM_LOOP(op, iterations)                                                               \
  asm volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n\tvpxord %%zmm31, %%zmm31, %%zmm31\n\t"        \
               "1:\n\t" OJ_REPEAT24(op) "dec %0\n\tjnz 1b\n\t"                                   \
               : "+r"(iterations)                                                                   \
               :                                                                                    \
               : OJ_REPEAT24(OJ_CLOBBER_ZMM) "xmm30", "xmm31", "cc")

__attribute__((target("avx512f,avx512bf16"))) void dpbf16_loop(int64_t iterations) { OJ_ZMM_LOOP(OJ_DPBF16, iterations); }
__attribute__((target("avx512f"))) void fma512_loop(int64_t iterations) { OJ_ZMM_LOOP(OJ_FMA512, iterations); }

#define OJ_REPEAT12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
__attribute__((target("avx2,fma"))) void fma256_loop(int64_t iterations) {
  // 12 accumulators: the 16 ymm registers of AVX2 less the two operands.
  asm volatile(
      "vpxor %%ymm14, %%ymm14, %%ymm14\n\tvpxor %%ymm15, %%ymm15, %%ymm15\n\t"
      "1:\n\t" OJ_REPEAT12(OJ_FMA256) OJ_REPEAT12(OJ_FMA256) "dec %0\n\tjnz 1b\n\t"
      : "+r"(iterations)
      :
      : OJ_REPEAT12(OJ_CLOBBER_ZMM) "xmm14", "xmm15", "cc");
}

// FLOP per second of one of the loops above, the best of three trials.
double best_rate(void (*loop)(int64_t), double flops_per_iteration) {
  const int64_t iterations = 100'000;  // 2.4M instructions: about a millisecond
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    loop(iterations);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, flops_per_iteration * static_cast<double>(iterations) / seconds);
  }
  return best;
}
}  // namespace

double measure_bf16_dot_flops_per_cycle(double clock_ghz) {
  if (clock_ghz <= 0 || !host_cpu().avx512bf16) return 0;
  return best_rate(dpbf16_loop, 24.0 * 16 * 4) / (clock_ghz * 1e9);  // per lane: two products, two adds
}

double measure_f32_fma_flops_per_cycle(double clock_ghz, int lanes) {
  if (clock_ghz <= 0) return 0;
  const HostCpu& cpu = host_cpu();
  if (lanes == 16 && cpu.avx512f) return best_rate(fma512_loop, 24.0 * 16 * 2) / (clock_ghz * 1e9);
  if (lanes == 8 && cpu.avx2 && cpu.fma) return best_rate(fma256_loop, 24.0 * 8 * 2) / (clock_ghz * 1e9);
  return 0;
}
#else
double measure_bf16_dot_flops_per_cycle(double) { return 0; }
double measure_f32_fma_flops_per_cycle(double, int) { return 0; }
#endif

#if defined(__x86_64__)
namespace {
// The 64-byte tile configuration (Intel SDM vol. 1, "Tile Configuration"): palette 1, then the
// bytes per row of tmm0-15 at offset 16 and their rows at offset 48.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

__attribute__((target("amx-tile,amx-bf16"))) double amx_loop_seconds(int64_t iterations) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  alignas(64) static uint16_t operands[16 * 32] = {};  // zeros: the sums stay finite
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operands, 64);
  _tile_loadd(5, operands, 64);
  _tile_loadd(6, operands, 64);
  _tile_loadd(7, operands, 64);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  alignas(64) static float sink[16 * 16];
  _tile_stored(0, sink, 64);
  _tile_release();
  benchmark_sink = static_cast<uint64_t>(sink[0]);
  return seconds;
}
}  // namespace

double measure_amx_bf16_flops_per_cycle(double clock_ghz) {
  if (!amx_availability().usable || clock_ghz <= 0) return 0;
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t iterations = 100'000;  // 400k TDPBF16PS, about 6.4M cycles at the nominal rate
    best = std::max(best, static_cast<double>(iterations) * 4 * 16 * 16 * 32 * 2 / amx_loop_seconds(iterations));
  }
  return best / (clock_ghz * 1e9);
}
#else
double measure_amx_bf16_flops_per_cycle(double) { return 0; }
#endif

std::string PeakEstimate::describe() const {
  char text[256];
  if (f32_measured_flops_per_cycle > 0)
    std::snprintf(text, sizeof text, "%d core(s) x %.2f GHz (measured) x %.1f f32 FLOP/cycle (measured; nominal %.0f) = %.0f GFLOP/s f32", cores,
                  clock_ghz, f32_measured_flops_per_cycle, f32_flops_per_cycle, f32_gflops());
  else
    std::snprintf(text, sizeof text, "%d core(s) x %.2f GHz (measured) x %.0f f32 FLOP/cycle = %.0f GFLOP/s f32", cores, clock_ghz,
                  f32_flops_per_cycle, f32_gflops());
  std::string result = text;
  if (bf16_flops_per_cycle > 0) {
    std::snprintf(text, sizeof text, "; bf16 dot product (vdpbf16ps) %.0f GFLOP/s nominal, %.0f measured", bf16_gflops(),
                  clock_ghz * cores * bf16_measured_flops_per_cycle);
    result += text;
  }
  if (amx_flops_per_cycle > 0) {
    std::snprintf(text, sizeof text, "; AMX-BF16 (tdpbf16ps) %.0f GFLOP/s nominal, %.0f measured", clock_ghz * cores * amx_flops_per_cycle,
                  amx_gflops());
    result += text;
  }
  return result;
}

PeakEstimate estimate_peak(const std::string& isa, int cores) {
  PeakEstimate peak;
  peak.clock_ghz = measure_clock_ghz();
  peak.cores = std::max(cores, 1);
  const bool amx = isa == "amx";
  const double lanes = (isa == "avx512f" || isa == "avx512bf16" || amx) ? 16 : isa == "avx2" ? 8 : 4;
  peak.f32_flops_per_cycle = 2 * lanes * 2;
  peak.f32_measured_flops_per_cycle = measure_f32_fma_flops_per_cycle(peak.clock_ghz, static_cast<int>(lanes));
  peak.bf16_flops_per_cycle = isa == "avx512bf16" || amx ? 2 * peak.f32_flops_per_cycle : 0;
  if (isa == "avx512bf16" || amx) peak.bf16_measured_flops_per_cycle = measure_bf16_dot_flops_per_cycle(peak.clock_ghz);
  if (amx) {
    peak.amx_flops_per_cycle = 1024;  // 16·16·32 multiply-adds every 16 cycles
    peak.amx_measured_flops_per_cycle = measure_amx_bf16_flops_per_cycle(peak.clock_ghz);
  }
  return peak;
}

}  // namespace orthojit
