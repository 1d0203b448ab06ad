// Microkernel cache.
#include "cpu/microkernel_cache.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "cpu/llvm_jit.h"

namespace orthojit::cpu {
namespace {

constexpr int kCacheFormatVersion = 1;

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

struct Registry {
  std::mutex mutex;
  std::map<CpuIsa, std::unique_ptr<LlvmJit>> jits;
  std::map<std::string, MicrokernelFunction> kernels;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

CompiledMicrokernel get_microkernel(const MicrokernelSpec& spec) {
  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = emit_microkernel(spec, *context);
  std::string text;
  llvm::raw_string_ostream stream(text);
  module->print(stream, nullptr);

  Registry& cache = registry();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto& jit = cache.jits[spec.isa];
  if (!jit) jit = std::make_unique<LlvmJit>(spec.isa);
  const std::string key = std::to_string(fnv1a(text + "|" + jit->cpu_name() + "|" + jit->features() + "|" + llvm_version() + "|" +
                                               std::to_string(kCacheFormatVersion) + "|" + ORTHOJIT_VERSION));
  if (auto it = cache.kernels.find(key); it != cache.kernels.end()) return {it->second, 0.0, key};
  const auto start = std::chrono::steady_clock::now();
  // A kernel name is unique per (isa, shape, kc); the JIT keeps one definition per name.
  auto* function = reinterpret_cast<MicrokernelFunction>(jit->compile(std::move(module), std::move(context), spec.name()));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cache.kernels[key] = function;
  return {function, seconds, key};
}

std::string microkernel_ir(const MicrokernelSpec& spec) {
  llvm::LLVMContext context;
  auto module = emit_microkernel(spec, context);
  return optimized_ir_text(spec.isa, *module);
}

}  // namespace orthojit::cpu
