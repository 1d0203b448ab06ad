// The LLVM side of the CPU backend in a build without LLVM 19 (ORTHOJIT_WITH_LLVM off or LLVM not
// found): the functions of microkernel_codegen.h, epilogue_codegen.h, kernel_cache.h and
// llvm_jit.h that the host parts and the layers above call, so they compile and link unchanged.
// Nothing here compiles a kernel: every entry point that would throws PartNotBuilt with
// cpu_backend_unavailable_reason() ("this build has no CPU backend (LLVM 19 was not found at
// configure time); use backend ref or cuda"). CpuExecutable's constructor refuses first, so in
// practice only the names below are ever called.
#include <string>

#include "cpu/build_status.h"
#include "cpu/epilogue_codegen.h"
#include "cpu/kernel_cache.h"
#include "cpu/llvm_jit.h"
#include "cpu/microkernel_codegen.h"

namespace orthojit::cpu {

// Referenced by the executable's kernel lookup, which never runs here (the constructor refuses).
std::string MicrokernelSpec::name() const { return "orthojit_ukernel_" + std::string(to_string(isa)) + "_not_built"; }
std::string EpilogueSpec::name() const { return "orthojit_epilogue_" + std::string(to_string(isa)) + "_not_built"; }

CompiledMicrokernel get_microkernel(const MicrokernelSpec&) { throw PartNotBuilt(cpu_backend_unavailable_reason()); }
CompiledEpilogue get_epilogue(const EpilogueSpec&) { throw PartNotBuilt(cpu_backend_unavailable_reason()); }
std::string microkernel_ir(const MicrokernelSpec&) { throw PartNotBuilt(cpu_backend_unavailable_reason()); }
std::string epilogue_ir(const EpilogueSpec&) { throw PartNotBuilt(cpu_backend_unavailable_reason()); }

// Part of the CPU tuning records' fingerprint: records from an LLVM build never match this one.
std::string llvm_version() { return "none (built without LLVM)"; }

}  // namespace orthojit::cpu
