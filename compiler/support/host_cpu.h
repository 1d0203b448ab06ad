// What the host CPU offers, detected at run time (cpuid + the OS's saved-state mask), so that
// code generation picks an ISA the machine really runs: AVX-512F, AVX512-BF16, AVX2+FMA, generic.
#pragma once

#include <string>

namespace orthojit {

struct HostCpu {
  std::string model;  // brand string, e.g. "AMD EPYC 9B45"
  int logical_cores = 1;
  bool avx2 = false, fma = false, avx512f = false, avx512bf16 = false, f16c = false;
  // AMX as CPUID reports it (leaf 7 subleaf 0, EDX bit 22 AMX-BF16, bit 24 AMX-TILE; subleaf 1
  // EAX bit 21 AMX-FP16) and whether the OS has enabled the tile state in XCR0 (bit 17 XTILECFG,
  // bit 18 XTILEDATA). Usable only after the process's permission request: amx_availability().
  bool amx_tile = false, amx_bf16 = false, amx_fp16 = false, xcr0_tile_state = false;
  std::string best_isa() const;  // "avx512bf16", "avx512f", "avx2+fma" or "generic"
};

const HostCpu& host_cpu();

// Whether this process may run AMX-BF16 code, and why not. Linux enables the 8 KiB tile-data
// state per process on request only (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18),
// Linux Documentation/arch/x86/xstate.rst): the permission is per process, shared by all its
// threads and inherited across fork/clone; the tile configuration (LDTILECFG) is per thread, and
// every generated AMX kernel loads its own. Without the permission the first tile instruction
// raises SIGILL.
struct AmxProbe {
  bool amx_tile = false, amx_bf16 = false, avx512bf16 = false;
  bool xcr0_tile_state = false;  // XCR0 bits 17 and 18
  // The OS's answer: 0 granted, otherwise the errno of arch_prctl (EINVAL: a kernel without
  // dynamic xstate support, before 5.16; EPERM/EBUSY: refused), or -1 when not asked.
  int permission_error = -1;
  bool permission_in_mask = false;  // ARCH_GET_XCOMP_PERM afterwards has bit 18
};
struct AmxAvailability {
  bool usable = false;
  std::string reason;  // why not (empty when usable), or what made it usable
};
// The decision from a probe (pure: tests feed refused permissions and hidden CPUID bits).
AmxAvailability evaluate_amx(const AmxProbe& probe);
// The process's answer, computed once: CPUID, XCR0, then the permission request. The environment
// variable ORTHOJIT_AMX_PERMISSION=refuse makes the request act as refused (EPERM) without asking
// the kernel, to test the fallback on machines that have AMX.
const AmxAvailability& amx_availability();

}  // namespace orthojit
