// Kernel cache.
#include "cpu/kernel_cache.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "cpu/llvm_jit.h"
#include "support/sha256.h"

namespace orthojit::cpu {
namespace {

constexpr int kCacheFormatVersion = 1;

struct Registry {
  std::mutex mutex;
  std::map<CpuIsa, std::unique_ptr<LlvmJit>> jits;
  std::map<std::string, void*> functions;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

using Emitter = std::function<std::unique_ptr<llvm::Module>(llvm::LLVMContext&)>;

void* compile_cached(CpuIsa isa, const std::string& symbol, const Emitter& emit, double& jit_seconds) {
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = emit(*context);
  std::string text;
  llvm::raw_string_ostream stream(text);
  module->print(stream, nullptr);

  Registry& cache = registry();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto& jit = cache.jits[isa];
  if (!jit) jit = std::make_unique<LlvmJit>(isa);
  const std::string key = sha256_hex(text + "|" + jit->cpu_name() + "|" + jit->features() + "|" + llvm_version() + "|" +
                                     std::to_string(kCacheFormatVersion) + "|" + ORTHOJIT_VERSION);
  jit_seconds = 0;
  if (auto it = cache.functions.find(key); it != cache.functions.end()) return it->second;
  const auto start = std::chrono::steady_clock::now();
  // A symbol names its (isa, shape, constants) uniquely, so the JIT holds one definition of it.
  void* address = jit->compile(std::move(module), std::move(context), symbol);
  jit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cache.functions[key] = address;
  return address;
}

}  // namespace

CompiledMicrokernel get_microkernel(const MicrokernelSpec& spec) {
  CompiledMicrokernel result;
  // An emulated AMX kernel has no AMX instructions: it is compiled for the generic path, which
  // every x86-64 machine runs.
  const CpuIsa isa = spec.amx && spec.amx_emulated ? CpuIsa::Generic : spec.isa;
  void* address = compile_cached(isa, spec.name(), [&](llvm::LLVMContext& context) { return emit_microkernel(spec, context); },
                                 result.jit_seconds);
  result.function = reinterpret_cast<MicrokernelFunction>(address);
  return result;
}

CompiledEpilogue get_epilogue(const EpilogueSpec& spec) {
  CompiledEpilogue result;
  void* address = compile_cached(spec.isa, spec.name(), [&](llvm::LLVMContext& context) { return emit_epilogue(spec, context); },
                                 result.jit_seconds);
  result.function = reinterpret_cast<EpilogueFunction>(address);
  return result;
}

std::string microkernel_ir(const MicrokernelSpec& spec) {
  llvm::LLVMContext context;
  auto module = emit_microkernel(spec, context);
  return optimized_ir_text(spec.amx && spec.amx_emulated ? CpuIsa::Generic : spec.isa, *module);
}

std::string epilogue_ir(const EpilogueSpec& spec) {
  llvm::LLVMContext context;
  auto module = emit_epilogue(spec, context);
  return optimized_ir_text(spec.isa, *module);
}

}  // namespace orthojit::cpu
