// Microkernel IR emission with IRBuilder. The accumulators are SSA values carried by phi nodes
// around the k-loop, so they stay in registers; see the header for the contract.
#include "cpu/microkernel_codegen.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cpu/amx_codegen.h"
#include "cpu/llvm_jit.h"

namespace orthojit::cpu {

std::string MicrokernelSpec::name() const {
  if (amx)
    return std::string(amx_fp16 ? "orthojit_ukernel_amx_fp16_" : "orthojit_ukernel_amx_bf16_") + std::to_string(m_valid) + "x" + std::to_string(n_valid) + "_k" + std::to_string(kc) +
           (amx_emulated ? "_emulated" : "");
  const IsaTraits t = traits_of(isa);
  return "orthojit_ukernel_" + std::string(to_string(isa)) + "_" + std::to_string(t.mr) + "x" + std::to_string(t.nr) + "_k" +
         std::to_string(kc) + (bf16_dot ? "_bf16dot" : "") +
         (a_direct ? "_adirect" : "") + (b_direct ? "_bdirect" : "") +
         (b_prefetch > 0 ? "_pf" + std::to_string(b_prefetch) : "");
}

std::unique_ptr<llvm::Module> emit_microkernel(const MicrokernelSpec& spec, llvm::LLVMContext& context) {
  if (spec.amx) return emit_amx_microkernel(spec, context);
  if (spec.kc < 1) throw std::logic_error("emit_microkernel: kc must be positive");
  if (spec.bf16_dot && (spec.isa != CpuIsa::Avx512Bf16 || spec.kc % 2 != 0))
    throw std::logic_error("emit_microkernel: bf16 dot products need the avx512bf16 path and an even kc");
  if (spec.bf16_dot && spec.b_direct) throw std::logic_error("emit_microkernel: a bf16 B is always packed (its pairs interleave two rows)");
  const IsaTraits traits = traits_of(spec.isa);
  const int width = traits.vector_width, mr = traits.mr, vectors = traits.nr / traits.vector_width;
  auto module = std::make_unique<llvm::Module>(spec.name(), context);
  llvm::IRBuilder<> builder(context);
  llvm::Type* f32 = builder.getFloatTy();
  llvm::Type* i64 = builder.getInt64Ty();
  llvm::Type* ptr = builder.getPtrTy();
  auto* vector_type = llvm::FixedVectorType::get(f32, static_cast<unsigned>(width));
  auto* function_type = llvm::FunctionType::get(builder.getVoidTy(), {ptr, ptr, ptr, i64, builder.getInt32Ty(), i64, i64}, false);
  auto* function = llvm::Function::Create(function_type, llvm::Function::ExternalLinkage, spec.name(), module.get());
  function->addFnAttr(llvm::Attribute::NoUnwind);
  function->addFnAttr("no-trapping-math", "true");
  auto arg = function->arg_begin();
  llvm::Value* a_panel = &*arg++;
  llvm::Value* b_panel = &*arg++;
  llvm::Value* c = &*arg++;
  llvm::Value* ldc = &*arg++;
  llvm::Value* accumulate = &*arg++;
  llvm::Value* lda = &*arg++;
  llvm::Value* ldb = &*arg++;
  for (unsigned i = 0; i < 3; ++i) function->addParamAttr(i, llvm::Attribute::NoAlias);
  a_panel->setName("a_panel");
  b_panel->setName("b_panel");
  c->setName("c");
  ldc->setName("ldc");
  accumulate->setName("accumulate");
  lda->setName("lda");
  ldb->setName("ldb");

  auto* entry = llvm::BasicBlock::Create(context, "entry", function);
  auto* loop = llvm::BasicBlock::Create(context, "k_loop", function);
  auto* exit = llvm::BasicBlock::Create(context, "store_c", function);

  // Tile element (i, v·W) of c: c + i·ldc + v·W floats.
  auto tile_address = [&](int i, int v) {
    llvm::Value* row = builder.CreateMul(ldc, builder.getInt64(static_cast<uint64_t>(i)));
    llvm::Value* offset = builder.CreateAdd(row, builder.getInt64(static_cast<uint64_t>(v * width)));
    return builder.CreateInBoundsGEP(f32, c, offset);
  };

  // Entry: prefetch the C tile (its rows are far apart in memory) so that the loads after the
  // k-loop hit the cache; the loop starts from zero and C is added at the end. The sum of a K
  // block is thus added to the partial sum of the earlier blocks: deterministic, independent of
  // threads and of the ISA path.
  builder.SetInsertPoint(entry);
  llvm::Function* prefetch = llvm::Intrinsic::getDeclaration(module.get(), llvm::Intrinsic::prefetch, {ptr});
  for (int i = 0; i < mr; ++i)
    for (int v = 0; v < vectors; v += std::max(1, 16 / width))  // one prefetch per 64-byte line
      builder.CreateCall(prefetch, {tile_address(i, v), builder.getInt32(1), builder.getInt32(3), builder.getInt32(1)});
  builder.CreateBr(loop);

  // k-loop: accumulators are phis, fed by zero (entry) or by the loop itself.
  builder.SetInsertPoint(loop);
  llvm::PHINode* k = builder.CreatePHI(i64, 2, "k");
  k->addIncoming(builder.getInt64(0), entry);
  std::vector<llvm::PHINode*> accumulators;
  llvm::Constant* zero = llvm::ConstantAggregateZero::get(vector_type);
  for (int index = 0; index < mr * vectors; ++index) {
    llvm::PHINode* phi = builder.CreatePHI(vector_type, 2, "acc");
    phi->addIncoming(zero, entry);
    accumulators.push_back(phi);
  }
  std::vector<llvm::Value*> updated(accumulators.size());
  if (spec.bf16_dot) {
    // One step = one k pair. B: (pair, NR, 2) bf16, a vector covers 16 columns x 2 k values.
    llvm::Type* i16 = builder.getInt16Ty();
    auto* pair_vector = llvm::FixedVectorType::get(builder.getBFloatTy(), 32);
    llvm::Function* dot = llvm::Intrinsic::getDeclaration(module.get(), llvm::Intrinsic::x86_avx512bf16_dpbf16ps_512);
    llvm::Value* b_row = builder.CreateInBoundsGEP(i16, b_panel, builder.CreateMul(k, builder.getInt64(static_cast<uint64_t>(2 * traits.nr))));
    if (spec.b_prefetch > 0) {  // as in the f32 path below: a pair step's B row is also 2 lines
      llvm::Value* ahead = builder.CreateInBoundsGEP(i16, b_row, builder.getInt64(static_cast<uint64_t>(spec.b_prefetch * 2 * traits.nr)));
      for (int v = 0; v < vectors; ++v)
        builder.CreateCall(prefetch, {builder.CreateInBoundsGEP(i16, ahead, builder.getInt64(static_cast<uint64_t>(v * 32))), builder.getInt32(0),
                                      builder.getInt32(3), builder.getInt32(1)});
    }
    std::vector<llvm::Value*> b_vectors;
    for (int v = 0; v < vectors; ++v) {
      llvm::Value* address = builder.CreateInBoundsGEP(i16, b_row, builder.getInt64(static_cast<uint64_t>(v * 32)));
      b_vectors.push_back(builder.CreateAlignedLoad(pair_vector, address, llvm::Align(64), "b_pairs"));
    }
    // A: (pair, MR, 2) bf16 packed, or row-major in place (row i's pair k at a + i·lda + 2k, in
    // bf16 elements); row i's pair is one 32-bit value, broadcast to the 16 lanes. In place, an
    // odd row stride puts the pairs at 2-byte alignment.
    llvm::Value* a_column =
        spec.a_direct ? builder.CreateInBoundsGEP(i16, a_panel, builder.CreateMul(k, builder.getInt64(2)))
                      : builder.CreateInBoundsGEP(i16, a_panel, builder.CreateMul(k, builder.getInt64(static_cast<uint64_t>(2 * mr))));
    for (int i = 0; i < mr; ++i) {
      llvm::Value* offset = spec.a_direct ? builder.CreateMul(lda, builder.getInt64(static_cast<uint64_t>(i)))
                                          : static_cast<llvm::Value*>(builder.getInt64(static_cast<uint64_t>(2 * i)));
      llvm::Value* pair = builder.CreateAlignedLoad(builder.getInt32Ty(), builder.CreateInBoundsGEP(i16, a_column, offset),
                                                    llvm::Align(spec.a_direct ? 2 : 4), "a_pair");
      llvm::Value* broadcast = builder.CreateBitCast(builder.CreateVectorSplat(16, pair), pair_vector, "a_pairs");
      for (int v = 0; v < vectors; ++v) {
        const size_t index = static_cast<size_t>(i * vectors + v);
        updated[index] = builder.CreateCall(dot, {accumulators[index], broadcast, b_vectors[static_cast<size_t>(v)]});
      }
    }
  } else {
    const llvm::Intrinsic::ID multiply_add = traits.fused_fma ? llvm::Intrinsic::fma : llvm::Intrinsic::fmuladd;
    llvm::Function* fma = llvm::Intrinsic::getDeclaration(module.get(), multiply_add, {vector_type});
    // B: this step's NR values at b_panel + k·NR (packed, 64-byte aligned) or b + k·ldb (direct).
    llvm::Value* b_row = builder.CreateInBoundsGEP(
        f32, b_panel, builder.CreateMul(k, spec.b_direct ? ldb : builder.getInt64(static_cast<uint64_t>(traits.nr))));
    const llvm::Align b_align(spec.b_direct ? 4 : static_cast<uint64_t>(width * 4));
    std::vector<llvm::Value*> b_vectors;
    for (int v = 0; v < vectors; ++v) {
      llvm::Value* address = builder.CreateInBoundsGEP(f32, b_row, builder.getInt64(static_cast<uint64_t>(v * width)));
      b_vectors.push_back(builder.CreateAlignedLoad(vector_type, address, b_align, "b"));
    }
    // Software prefetch of B's row b_prefetch steps ahead: the A micro-panel stays in L1 while B
    // micro-panels stream from L2, and the hardware prefetchers alone left the FMAs waiting
    // (2048³, one thread: +10% at 16 steps, bench/RESULTS.md).
    if (spec.b_prefetch > 0) {
      llvm::Value* step = spec.b_direct ? ldb : builder.getInt64(static_cast<uint64_t>(traits.nr));
      llvm::Value* ahead = builder.CreateInBoundsGEP(f32, b_row, builder.CreateMul(step, builder.getInt64(static_cast<uint64_t>(spec.b_prefetch))));
      for (int v = 0; v < vectors; v += std::max(1, 16 / width))  // one per 64-byte line
        builder.CreateCall(prefetch, {builder.CreateInBoundsGEP(f32, ahead, builder.getInt64(static_cast<uint64_t>(v * width))), builder.getInt32(0),
                                      builder.getInt32(3), builder.getInt32(1)});
    }
    // A: this step's MR values at a_panel + k·MR + i (packed) or a + i·lda + k (direct).
    llvm::Value* a_column = spec.a_direct
                                ? builder.CreateInBoundsGEP(f32, a_panel, k)
                                : builder.CreateInBoundsGEP(f32, a_panel, builder.CreateMul(k, builder.getInt64(static_cast<uint64_t>(mr))));
    for (int i = 0; i < mr; ++i) {
      llvm::Value* offset = spec.a_direct ? builder.CreateMul(lda, builder.getInt64(static_cast<uint64_t>(i)))
                                          : static_cast<llvm::Value*>(builder.getInt64(static_cast<uint64_t>(i)));
      llvm::Value* a_value = builder.CreateAlignedLoad(f32, builder.CreateInBoundsGEP(f32, a_column, offset), llvm::Align(4), "a");
      llvm::Value* broadcast = builder.CreateVectorSplat(static_cast<unsigned>(width), a_value, "a_splat");
      for (int v = 0; v < vectors; ++v) {
        const size_t index = static_cast<size_t>(i * vectors + v);
        updated[index] = builder.CreateCall(fma, {broadcast, b_vectors[static_cast<size_t>(v)], accumulators[index]});
      }
    }
  }
  llvm::Value* next_k = builder.CreateAdd(k, builder.getInt64(1), "k_next");
  llvm::BasicBlock* loop_end = builder.GetInsertBlock();
  k->addIncoming(next_k, loop_end);
  for (size_t index = 0; index < accumulators.size(); ++index) accumulators[index]->addIncoming(updated[index], loop_end);
  const int64_t steps = spec.bf16_dot ? spec.kc / 2 : spec.kc;
  builder.CreateCondBr(builder.CreateICmpULT(next_k, builder.getInt64(static_cast<uint64_t>(steps))), loop, exit);

  // Exit: c = sum (first K block) or c += sum (later blocks).
  builder.SetInsertPoint(exit);
  auto* add_c = llvm::BasicBlock::Create(context, "add_c", function);
  auto* store = llvm::BasicBlock::Create(context, "store", function);
  builder.CreateCondBr(builder.CreateICmpNE(accumulate, builder.getInt32(0)), add_c, store);
  builder.SetInsertPoint(add_c);
  std::vector<llvm::Value*> summed(updated.size());
  for (int i = 0; i < mr; ++i)
    for (int v = 0; v < vectors; ++v) {
      const size_t index = static_cast<size_t>(i * vectors + v);
      llvm::Value* previous = builder.CreateAlignedLoad(vector_type, tile_address(i, v), llvm::Align(4), "c_in");
      summed[index] = builder.CreateFAdd(previous, updated[index]);
    }
  builder.CreateBr(store);
  builder.SetInsertPoint(store);
  std::vector<llvm::Value*> results(updated.size());
  for (size_t index = 0; index < updated.size(); ++index) {
    llvm::PHINode* phi = builder.CreatePHI(vector_type, 2, "c_out");
    phi->addIncoming(updated[index], exit);
    phi->addIncoming(summed[index], add_c);
    results[index] = phi;
  }
  for (int i = 0; i < mr; ++i)
    for (int v = 0; v < vectors; ++v)
      builder.CreateAlignedStore(results[static_cast<size_t>(i * vectors + v)], tile_address(i, v), llvm::Align(4));
  builder.CreateRetVoid();

  verify_generated_module(*module, "emit_microkernel");
  return module;
}

}  // namespace orthojit::cpu
