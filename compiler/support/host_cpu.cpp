// Host CPU feature detection.
#include "support/host_cpu.h"

#include <cstring>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace orthojit {

std::string HostCpu::best_isa() const {
  if (avx512f && avx512bf16) return "avx512bf16";
  if (avx512f) return "avx512f";
  if (avx2 && fma) return "avx2+fma";
  return "generic";
}

namespace {

HostCpu detect() {
  HostCpu cpu;
  cpu.logical_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  char brand[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf) {
    if (!__get_cpuid(0x80000002 + leaf, &eax, &ebx, &ecx, &edx)) break;
    std::memcpy(brand + 16 * leaf, &eax, 4);
    std::memcpy(brand + 16 * leaf + 4, &ebx, 4);
    std::memcpy(brand + 16 * leaf + 8, &ecx, 4);
    std::memcpy(brand + 16 * leaf + 12, &edx, 4);
  }
  cpu.model = brand;
  while (!cpu.model.empty() && cpu.model.back() == ' ') cpu.model.pop_back();
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return cpu;
  const bool osxsave = (ecx >> 27) & 1;
  cpu.fma = (ecx >> 12) & 1;
  cpu.f16c = (ecx >> 29) & 1;
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6;       // XMM and YMM state saved
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;  // plus opmask and ZMM state
  cpu.fma &= os_avx;
  cpu.f16c &= os_avx;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    cpu.avx2 = os_avx && ((ebx >> 5) & 1);
    cpu.avx512f = os_avx512 && ((ebx >> 16) & 1);
  }
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) cpu.avx512bf16 = cpu.avx512f && ((eax >> 5) & 1);
#endif
  return cpu;
}

}  // namespace

const HostCpu& host_cpu() {
  static const HostCpu cpu = detect();
  return cpu;
}

}  // namespace orthojit
