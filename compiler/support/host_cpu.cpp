// Host CPU feature detection.
#include "support/host_cpu.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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
  // Intel SDM vol. 1, 13.3: XCR0 bit 17 (XTILECFG) and bit 18 (XTILEDATA) enable the AMX state.
  cpu.xcr0_tile_state = ((xcr0 >> 17) & 3) == 3;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    cpu.avx2 = os_avx && ((ebx >> 5) & 1);
    cpu.avx512f = os_avx512 && ((ebx >> 16) & 1);
    // Intel SDM vol. 2A, CPUID leaf 07H subleaf 0, EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
    cpu.amx_bf16 = (edx >> 22) & 1;
    cpu.amx_tile = (edx >> 24) & 1;
  }
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    cpu.avx512bf16 = cpu.avx512f && ((eax >> 5) & 1);
    cpu.amx_fp16 = (eax >> 21) & 1;  // leaf 07H subleaf 1, EAX bit 21
  }
#endif
  return cpu;
}

}  // namespace

const HostCpu& host_cpu() {
  static const HostCpu cpu = detect();
  return cpu;
}

AmxAvailability evaluate_amx(const AmxProbe& probe) {
  if (!probe.amx_tile || !probe.amx_bf16)
    return {false, std::string("the CPU does not report ") + (!probe.amx_tile ? "AMX-TILE" : "AMX-BF16") +
                       " (CPUID leaf 7 EDX bits 24/22; a CPU without matrix units, or a hypervisor that hides them)"};
  if (!probe.avx512bf16) return {false, "AMX without AVX512-BF16: the AMX path needs the AVX-512 kernels for its f32 products"};
  if (!probe.xcr0_tile_state) return {false, "the OS has not enabled the tile state (XCR0 bits 17/18 clear)"};
  if (probe.permission_error == -1) return {false, "the tile-data permission was not requested"};
  if (probe.permission_error != 0)
    return {false, std::string("the kernel refused the tile-data permission: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) failed with ") +
                       (probe.permission_error == EINVAL ? "EINVAL (a kernel before Linux 5.16 has no AMX support)" : std::strerror(probe.permission_error))};
  if (!probe.permission_in_mask) return {false, "arch_prctl(ARCH_GET_XCOMP_PERM) does not list XTILEDATA after the request"};
  return {true, "CPUID amx_tile+amx_bf16, XCR0 tile state, tile-data permission granted"};
}

namespace {

AmxProbe probe_amx() {
  const HostCpu& cpu = host_cpu();
  AmxProbe probe;
  probe.amx_tile = cpu.amx_tile;
  probe.amx_bf16 = cpu.amx_bf16;
  probe.avx512bf16 = cpu.avx512bf16;
  probe.xcr0_tile_state = cpu.xcr0_tile_state;
  if (!(probe.amx_tile && probe.amx_bf16 && probe.avx512bf16 && probe.xcr0_tile_state)) return probe;
  if (const char* text = std::getenv("ORTHOJIT_AMX_PERMISSION"); text && std::strcmp(text, "refuse") == 0) {
    probe.permission_error = EPERM;
    return probe;
  }
#if defined(__linux__) && defined(__x86_64__)
  // arch/x86/include/uapi/asm/prctl.h: ARCH_GET_XCOMP_PERM 0x1022, ARCH_REQ_XCOMP_PERM 0x1023.
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    probe.permission_error = errno;
    return probe;
  }
  probe.permission_error = 0;
  unsigned long long mask = 0;
  probe.permission_in_mask = syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) == 0 && ((mask >> kXfeatureXtiledata) & 1);
#else
  probe.permission_error = ENOSYS;
#endif
  return probe;
}

}  // namespace

const AmxAvailability& amx_availability() {
  static const AmxAvailability availability = evaluate_amx(probe_amx());
  return availability;
}

}  // namespace orthojit
