// The process-wide in-memory cache of JIT-compiled microkernels, one LLVM JIT per ISA path.
// Key (DESIGN.md §3): a hash of the generated IR text, the target CPU and features, the LLVM
// version, the cache-format version and the project version. Compile failures are not cached.
#pragma once

#include <cstdint>
#include <string>

#include "cpu/gemm_driver.h"
#include "cpu/microkernel_codegen.h"

namespace orthojit::cpu {

struct CompiledMicrokernel {
  MicrokernelFunction function = nullptr;
  double jit_seconds = 0;  // 0 when it came from the cache
  std::string key;
};

CompiledMicrokernel get_microkernel(const MicrokernelSpec& spec);

// The optimized LLVM IR of a microkernel (for --emit llvm).
std::string microkernel_ir(const MicrokernelSpec& spec);

}  // namespace orthojit::cpu
