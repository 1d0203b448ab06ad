// Timing harness.
#include "autotune/timing_harness.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "support/host_cpu.h"

namespace orthojit::autotune {
namespace {

void flush_caches() {
  static std::vector<char> buffer(static_cast<size_t>(cache_flush_bytes()));
  static char value = 0;
  std::memset(buffer.data(), ++value, buffer.size());
  asm volatile("" : : "r"(buffer.data()) : "memory");  // the writes must happen
}

}  // namespace

int64_t cache_flush_bytes() {
  long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 <= 0) l2 = 2 << 20;
  return std::max<int64_t>(int64_t{8} << 20, int64_t{4} * l2 * host_cpu().logical_cores);
}

double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double position = p * static_cast<double>(samples.size() - 1);
  const size_t below = static_cast<size_t>(position);
  const size_t above = std::min(below + 1, samples.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return samples[below] * (1 - fraction) + samples[above] * fraction;
}

Timing time_repeated(const std::function<void()>& run, const TimingSettings& settings) {
  using Clock = std::chrono::steady_clock;
  auto timed = [&] {
    if (settings.flush_caches) flush_caches();
    const auto start = Clock::now();
    run();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  Timing timing;
  // The warm-up, kept as a sample only when runs are long.
  const double first = settings.initial_run_ms > 1000 ? settings.initial_run_ms : timed();
  const double budget_ms = settings.budget_seconds * 1000;
  if (first > 1000 || first >= budget_ms) timing.samples_ms.push_back(first);
  const auto started = Clock::now();
  while (timing.repeats() < settings.max_repeats) {
    const double spent = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    const double typical = timing.samples_ms.empty() ? first : timing.samples_ms.back();
    if (timing.repeats() >= settings.min_repeats && spent + typical > budget_ms) break;
    if (timing.repeats() >= 1 && spent + typical > budget_ms && first > 1000) break;  // long runs: as many as fit
    timing.samples_ms.push_back(timed());
  }
  summarize(timing);
  return timing;
}

void summarize(Timing& timing) {
  timing.p20_ms = percentile(timing.samples_ms, 0.2);
  timing.p50_ms = percentile(timing.samples_ms, 0.5);
  timing.p80_ms = percentile(timing.samples_ms, 0.8);
}

}  // namespace orthojit::autotune
