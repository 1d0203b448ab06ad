// What the host CPU offers, detected at run time (cpuid + the OS's saved-state mask), so that
// code generation picks an ISA the machine really runs: AVX-512F, AVX512-BF16, AVX2+FMA, generic.
#pragma once

#include <string>

namespace orthojit {

struct HostCpu {
  std::string model;  // brand string, e.g. "AMD EPYC 9B45"
  int logical_cores = 1;
  bool avx2 = false, fma = false, avx512f = false, avx512bf16 = false, f16c = false;
  std::string best_isa() const;  // "avx512bf16", "avx512f", "avx2+fma" or "generic"
};

const HostCpu& host_cpu();

}  // namespace orthojit
