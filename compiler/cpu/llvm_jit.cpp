// ORC LLJIT wrapper.
#include "cpu/llvm_jit.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <stdexcept>

#include "cpu/amx_emulator.h"

namespace orthojit::cpu {
namespace {

void initialize_llvm_once() {
  static const bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;
}

std::string error_text(llvm::Error error) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  stream << error;
  return text;
}

llvm::orc::JITTargetMachineBuilder machine_builder_for(CpuIsa isa, std::string& cpu_name, std::string& features) {
  initialize_llvm_once();
  auto detected = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!detected) throw std::runtime_error("LLVM cannot describe the host: " + error_text(detected.takeError()));
  llvm::orc::JITTargetMachineBuilder builder = std::move(*detected);
  const IsaTraits traits = traits_of(isa);
  if (!traits.cpu.empty()) {
    // A forced path: a generic CPU model of that level, none of the host's extra features.
    builder.setCPU(traits.cpu);
    builder.getFeatures() = llvm::SubtargetFeatures();
    if (!traits.features.empty()) builder.getFeatures().addFeaturesVector({traits.features});
  }
  builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  cpu_name = builder.getCPU();
  features = builder.getFeatures().getString();
  return builder;
}

void optimize(llvm::Module& module, llvm::TargetMachine* machine) {
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgscc;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder passes(machine);
  passes.registerModuleAnalyses(modules);
  passes.registerCGSCCAnalyses(cgscc);
  passes.registerFunctionAnalyses(functions);
  passes.registerLoopAnalyses(loops);
  passes.crossRegisterProxies(loops, functions, cgscc, modules);
  passes.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, modules);
}

}  // namespace

void verify_generated_module(const llvm::Module& module, const std::string& emitter) {
  std::string errors;
  llvm::raw_string_ostream stream(errors);
  if (llvm::verifyModule(module, &stream)) throw std::logic_error(emitter + " produced invalid IR: " + errors);
}

std::string llvm_version() { return std::string("LLVM ") + LLVM_VERSION_STRING; }

LlvmJit::LlvmJit(CpuIsa isa) : isa_(isa) {
  // host_executes, not host_supports: the AMX self-check compiles its kernels through here.
  if (!host_executes(isa)) throw std::runtime_error("this CPU cannot run the " + std::string(to_string(isa)) + " code path");
  auto builder = machine_builder_for(isa, cpu_name_, features_);
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(builder)).create();
  if (!jit) throw std::runtime_error("cannot create the LLVM JIT: " + error_text(jit.takeError()));
  jit_ = std::move(*jit);
  // Runtime helpers LLVM may call (e.g. __truncsfhf2 for f16 on the generic path) come from the
  // process (libgcc).
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(jit_->getDataLayout().getGlobalPrefix());
  if (!process) throw std::runtime_error("LLVM JIT cannot search the process's symbols: " + error_text(process.takeError()));
  jit_->getMainJITDylib().addGenerator(std::move(*process));
  // The AMX emulator's entry points (amx_emulator.h), which emulated AMX kernels call: defined by
  // address, so they resolve whether or not the executable exports its symbols.
  llvm::orc::SymbolMap emulator;
  for (const auto& [name, address] : amx_emulator_symbols())
    emulator[jit_->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address), llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  if (auto error = jit_->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(emulator))))
    throw std::runtime_error("LLVM JIT cannot define the AMX emulator's symbols: " + error_text(std::move(error)));
}

LlvmJit::~LlvmJit() = default;

void* LlvmJit::compile(std::unique_ptr<llvm::Module> module, std::unique_ptr<llvm::LLVMContext> context, const std::string& symbol) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string cpu, features;
  auto machine = machine_builder_for(isa_, cpu, features).createTargetMachine();
  if (!machine) throw std::runtime_error("cannot create an LLVM target machine: " + error_text(machine.takeError()));
  module->setDataLayout(jit_->getDataLayout());
  module->setTargetTriple(jit_->getTargetTriple().str());
  for (auto& function : *module) {
    if (function.isDeclaration()) continue;
    function.addFnAttr("target-cpu", cpu);
    function.addFnAttr("target-features", features);
  }
  optimize(*module, machine->get());
  if (auto error = jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(context))))
    throw std::runtime_error("LLVM JIT cannot add the module: " + error_text(std::move(error)));
  auto address = jit_->lookup(symbol);
  if (!address) throw std::runtime_error("LLVM JIT cannot find " + symbol + ": " + error_text(address.takeError()));
  return address->toPtr<void*>();
}

std::string assembly_for_cpu(llvm::Module& module, const std::string& cpu) {
  initialize_llvm_once();
  const std::string triple = llvm::sys::getProcessTriple();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) throw std::runtime_error("LLVM has no target for " + triple + ": " + error);
  std::unique_ptr<llvm::TargetMachine> machine(
      target->createTargetMachine(triple, cpu, "", llvm::TargetOptions(), llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!machine) throw std::runtime_error("LLVM cannot create a target machine for " + cpu);
  module.setDataLayout(machine->createDataLayout());
  module.setTargetTriple(triple);
  for (auto& function : module)
    if (!function.isDeclaration()) function.addFnAttr("target-cpu", cpu);
  optimize(module, machine.get());
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream stream(text);
  llvm::legacy::PassManager passes;
  if (machine->addPassesToEmitFile(passes, stream, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw std::runtime_error("LLVM cannot emit assembly for " + cpu);
  passes.run(module);
  return std::string(text.str());
}

std::string optimized_ir_text(CpuIsa isa, llvm::Module& module) {
  std::string cpu, features;
  auto machine = machine_builder_for(isa, cpu, features).createTargetMachine();
  if (!machine) throw std::runtime_error("cannot create an LLVM target machine: " + error_text(machine.takeError()));
  module.setDataLayout((*machine)->createDataLayout());
  module.setTargetTriple((*machine)->getTargetTriple().str());
  for (auto& function : module) {
    if (function.isDeclaration()) continue;
    function.addFnAttr("target-cpu", cpu);
    function.addFnAttr("target-features", features);
  }
  optimize(module, machine->get());
  std::string text;
  llvm::raw_string_ostream stream(text);
  module.print(stream, nullptr);
  return text;
}

}  // namespace orthojit::cpu
