// The process-wide in-memory cache of JIT-compiled kernels (microkernels and epilogues), one LLVM
// JIT per ISA path (docs/cpu-backend.md, "Caches"). Key: the SHA-256 of the generated IR text, the
// target CPU and features, the LLVM version, the cache-format version and the project version.
// Failures are not cached.
#pragma once

#include <cstdint>
#include <string>

#include "cpu/epilogue_codegen.h"
#include "cpu/gemm_driver.h"
#include "cpu/microkernel_codegen.h"

namespace orthojit::cpu {

struct CompiledMicrokernel {
  MicrokernelFunction function = nullptr;
  double jit_seconds = 0;  // 0 when it came from the cache
};
struct CompiledEpilogue {
  EpilogueFunction function = nullptr;
  double jit_seconds = 0;
};

CompiledMicrokernel get_microkernel(const MicrokernelSpec& spec);
CompiledEpilogue get_epilogue(const EpilogueSpec& spec);

// The optimized LLVM IR (for --emit llvm).
std::string microkernel_ir(const MicrokernelSpec& spec);
std::string epilogue_ir(const EpilogueSpec& spec);

}  // namespace orthojit::cpu
