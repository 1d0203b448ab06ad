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
__attribute__((target("avx512f,avx512bf16"))) double measure_bf16_dot_flops_per_cycle(double clock_ghz) {
  __m512 acc[24];
  for (auto& value : acc) value = _mm512_setzero_ps();
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80)), b = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f003f00));
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t iterations = 200'000;
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iterations; ++i)
      for (auto& value : acc) value = _mm512_dpbf16_ps(value, a, b);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(iterations) * 24 * 16 * 4 / seconds);
  }
  float sum = 0, lanes[16];
  for (const auto& value : acc) {
    _mm512_storeu_ps(lanes, value);
    for (float lane : lanes) sum += lane;
  }
  benchmark_sink = static_cast<uint64_t>(sum);  // keeps the chains alive
  return best / (clock_ghz * 1e9);
}
#else
double measure_bf16_dot_flops_per_cycle(double) { return 0; }
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
  peak.bf16_flops_per_cycle = isa == "avx512bf16" || amx ? 2 * peak.f32_flops_per_cycle : 0;
  if (isa == "avx512bf16" || amx) peak.bf16_measured_flops_per_cycle = measure_bf16_dot_flops_per_cycle(peak.clock_ghz);
  if (amx) {
    peak.amx_flops_per_cycle = 1024;  // 16·16·32 multiply-adds every 16 cycles
    peak.amx_measured_flops_per_cycle = measure_amx_bf16_flops_per_cycle(peak.clock_ghz);
  }
  return peak;
}

}  // namespace orthojit
