// The resident memory a call adds at its peak, for the checkpoint benchmarks: VmHWM after the call
// (the high-water mark reset before it through /proc/self/clear_refs, Linux >= 4.0) less VmRSS
// before it. Run the benchmarks with MALLOC_MMAP_THRESHOLD_=1048576 so that glibc maps every large
// block and unmaps it when freed: the resident memory then measures what is live.
#pragma once

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace orthojit::bench {

// A field of /proc/self/status in KiB (VmRSS, VmHWM).
inline long status_kib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(status, line))
    if (line.rfind(key, 0) == 0) return std::strtol(line.c_str() + key.size(), nullptr, 10);
  throw std::runtime_error(std::string("/proc/self/status has no ") + field);
}

// Resets VmHWM to the current VmRSS.
inline void reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

}  // namespace orthojit::bench
