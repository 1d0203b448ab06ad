// Times one candidate: a warm-up run, then repeats within a time budget, the caches flushed
// before every timed run; reports the median and the 20th/80th percentiles.
//
// Why a flush: in training, a weight's gradient arrives from the backward pass, not hot in this
// core's caches; timing back-to-back runs on the same input flatters small shapes. The flush
// writes a buffer of 4x the machine's total L2 (the shared L3 is not flushed: on the development
// machine it is 260 MiB, and the matrices of a large shape exceed L2 anyway). Runs longer than a
// second skip the warm-up (the JIT happened at compile time; buffers are faulted in by the check
// run that precedes timing).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace orthojit::autotune {

struct TimingSettings {
  int min_repeats = 3;
  int max_repeats = 15;
  double budget_seconds = 2.0;  // for this candidate's timed repeats (at least min_repeats... unless one run exceeds it)
  bool flush_caches = true;
  // A run already made (the correctness check's), in ms. When longer than a second it is the
  // warm-up and the first sample: a 10 s candidate is not run twice just to warm it up.
  double initial_run_ms = 0;
};

struct Timing {
  std::vector<double> samples_ms;
  double p20_ms = 0, p50_ms = 0, p80_ms = 0;
  int repeats() const { return static_cast<int>(samples_ms.size()); }
};

// The percentile of sorted samples by linear interpolation (p in [0, 1]).
double percentile(std::vector<double> samples, double p);

// Sets p20/p50/p80 from the samples (after adding samples, e.g. a re-timing's).
void summarize(Timing& timing);

// Runs `run` as TimingSettings says. One timed run at least; a run longer than the whole budget
// is timed once.
Timing time_repeated(const std::function<void()>& run, const TimingSettings& settings);

// Bytes the flush writes (4x total L2, at least 8 MiB).
int64_t cache_flush_bytes();

}  // namespace orthojit::autotune
