// An ORC LLJIT for one CPU ISA path: optimizes a module (the O3 pipeline, tuned for the path's CPU
// and features) and compiles it to host code. Functions stay valid as long as the LlvmJit lives.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "cpu/cpu_isa.h"

namespace llvm {
class LLVMContext;
class Module;
namespace orc {
class LLJIT;
}
}  // namespace llvm

namespace orthojit::cpu {

class LlvmJit {
 public:
  explicit LlvmJit(CpuIsa isa);  // throws std::runtime_error when the ISA is not runnable here
  ~LlvmJit();
  LlvmJit(const LlvmJit&) = delete;
  LlvmJit& operator=(const LlvmJit&) = delete;

  // Optimizes and compiles `module` (created in `context`, both owned afterwards by the JIT) and
  // returns the address of `symbol`.
  void* compile(std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> context, const std::string& symbol);

  CpuIsa isa() const { return isa_; }
  const std::string& cpu_name() const { return cpu_name_; }
  const std::string& features() const { return features_; }

 private:
  CpuIsa isa_;
  std::string cpu_name_, features_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::mutex mutex_;
};

// The module's text (what `orthojit compile --emit llvm` prints), after the same optimization.
std::string optimized_ir_text(CpuIsa isa, llvm::Module& module);

// The x86-64 assembly of `module` for LLVM CPU `cpu` (e.g. "sapphirerapids"), after the same O3
// optimization and code generation as the JIT: what a kernel compiles to on a CPU this machine
// need not be (the AMX kernels' instruction test).
std::string assembly_for_cpu(llvm::Module& module, const std::string& cpu);

// Throws std::logic_error("<emitter> produced invalid IR: ...") when `module` fails LLVM's verifier.
void verify_generated_module(const llvm::Module& module, const std::string& emitter);

// "LLVM 19.1.7": part of every cache key.
std::string llvm_version();

}  // namespace orthojit::cpu
