// Epilogue IR emission: two nested counted loops with the arithmetic of the header.
#include "cpu/epilogue_codegen.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <bit>
#include <cstdio>
#include <stdexcept>

#include "cpu/llvm_jit.h"

namespace orthojit::cpu {
namespace {

std::string hex(float value) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", std::bit_cast<uint32_t>(value));
  return text;
}

llvm::Type* storage_type(llvm::IRBuilder<>& builder, ScalarType type) {
  return type == ScalarType::F32 ? builder.getFloatTy() : builder.getInt16Ty();
}

// Loads one element of storage `type` as f32.
llvm::Value* load_as_float(llvm::IRBuilder<>& builder, ScalarType type, llvm::Value* address) {
  if (type == ScalarType::F32) return builder.CreateAlignedLoad(builder.getFloatTy(), address, llvm::Align(4));
  llvm::Value* bits = builder.CreateAlignedLoad(builder.getInt16Ty(), address, llvm::Align(2));
  if (type == ScalarType::BF16) {
    llvm::Value* wide = builder.CreateShl(builder.CreateZExt(bits, builder.getInt32Ty()), 16);
    return builder.CreateBitCast(wide, builder.getFloatTy());
  }
  return builder.CreateFPExt(builder.CreateBitCast(bits, builder.getHalfTy()), builder.getFloatTy());
}

// Rounds an f32 value to storage `type` (nearest-even) and returns the stored bits / value.
llvm::Value* round_from_float(llvm::IRBuilder<>& builder, ScalarType type, llvm::Value* value) {
  if (type == ScalarType::F32) return value;
  if (type == ScalarType::F16) return builder.CreateBitCast(builder.CreateFPTrunc(value, builder.getHalfTy()), builder.getInt16Ty());
  llvm::Value* bits = builder.CreateBitCast(value, builder.getInt32Ty());
  llvm::Value* lsb = builder.CreateAnd(builder.CreateLShr(bits, 16), 1);
  llvm::Value* rounded = builder.CreateLShr(builder.CreateAdd(bits, builder.CreateAdd(lsb, builder.getInt32(0x7fff))), 16);
  llvm::Value* quiet_nan = builder.CreateOr(builder.CreateLShr(bits, 16), 0x40);
  llvm::Value* is_nan = builder.CreateFCmpUNO(value, value);
  return builder.CreateTrunc(builder.CreateSelect(is_nan, quiet_nan, rounded), builder.getInt16Ty());
}

}  // namespace

std::string EpilogueSpec::name() const {
  return "orthojit_epilogue_" + std::string(to_string(isa)) + "_a" + hex(alpha) + (has_c ? "_b" + hex(beta) + "_c" + std::string(to_string(c_type)) : "") +
         (gamma != 0.0f ? "_g" + hex(gamma) : "") + "_d" + std::string(to_string(d_type));
}

std::unique_ptr<llvm::Module> emit_epilogue(const EpilogueSpec& spec, llvm::LLVMContext& context) {
  auto module = std::make_unique<llvm::Module>(spec.name(), context);
  llvm::IRBuilder<> builder(context);
  llvm::Type* f32 = builder.getFloatTy();
  llvm::Type* i64 = builder.getInt64Ty();
  llvm::Type* ptr = builder.getPtrTy();
  auto* type = llvm::FunctionType::get(builder.getVoidTy(), {ptr, i64, ptr, i64, ptr, i64, i64, i64, i64}, false);
  auto* function = llvm::Function::Create(type, llvm::Function::ExternalLinkage, spec.name(), module.get());
  function->addFnAttr(llvm::Attribute::NoUnwind);
  auto arg = function->arg_begin();
  llvm::Value* acc = &*arg++;
  llvm::Value* acc_stride = &*arg++;
  llvm::Value* c = &*arg++;
  llvm::Value* c_stride = &*arg++;
  llvm::Value* d = &*arg++;
  llvm::Value* d_stride = &*arg++;
  llvm::Value* rows = &*arg++;
  llvm::Value* cols = &*arg++;
  llvm::Value* diagonal = &*arg++;

  auto* entry = llvm::BasicBlock::Create(context, "entry", function);
  auto* row_loop = llvm::BasicBlock::Create(context, "row", function);
  auto* column_loop = llvm::BasicBlock::Create(context, "column", function);
  auto* row_end = llvm::BasicBlock::Create(context, "row_end", function);
  auto* done = llvm::BasicBlock::Create(context, "done", function);
  builder.SetInsertPoint(entry);
  builder.CreateCondBr(builder.CreateAnd(builder.CreateICmpSGT(rows, builder.getInt64(0)), builder.CreateICmpSGT(cols, builder.getInt64(0))),
                       row_loop, done);

  builder.SetInsertPoint(row_loop);
  llvm::PHINode* i = builder.CreatePHI(i64, 2, "i");
  i->addIncoming(builder.getInt64(0), entry);
  llvm::Value* acc_row = builder.CreateInBoundsGEP(f32, acc, builder.CreateMul(i, acc_stride));
  llvm::Value* c_row = spec.has_c ? builder.CreateInBoundsGEP(storage_type(builder, spec.c_type), c, builder.CreateMul(i, c_stride)) : nullptr;
  llvm::Value* d_row = builder.CreateInBoundsGEP(storage_type(builder, spec.d_type), d, builder.CreateMul(i, d_stride));
  builder.CreateBr(column_loop);

  builder.SetInsertPoint(column_loop);
  llvm::PHINode* j = builder.CreatePHI(i64, 2, "j");
  j->addIncoming(builder.getInt64(0), row_loop);
  llvm::Value* value = builder.CreateAlignedLoad(f32, builder.CreateInBoundsGEP(f32, acc_row, j), llvm::Align(4));
  if (spec.alpha != 1.0f) value = builder.CreateFMul(llvm::ConstantFP::get(f32, spec.alpha), value);
  if (spec.has_c) {
    llvm::Value* c_value = load_as_float(builder, spec.c_type, builder.CreateInBoundsGEP(storage_type(builder, spec.c_type), c_row, j));
    value = builder.CreateFAdd(value, builder.CreateFMul(llvm::ConstantFP::get(f32, spec.beta), c_value));
  }
  if (spec.gamma != 0.0f) {
    llvm::Value* on_diagonal = builder.CreateICmpEQ(j, builder.CreateAdd(i, diagonal));
    value = builder.CreateFAdd(value, builder.CreateSelect(on_diagonal, llvm::ConstantFP::get(f32, spec.gamma), llvm::ConstantFP::get(f32, 0.0)));
  }
  builder.CreateAlignedStore(round_from_float(builder, spec.d_type, value), builder.CreateInBoundsGEP(storage_type(builder, spec.d_type), d_row, j),
                             llvm::Align(spec.d_type == ScalarType::F32 ? 4 : 2));
  llvm::Value* next_j = builder.CreateAdd(j, builder.getInt64(1));
  j->addIncoming(next_j, column_loop);
  builder.CreateCondBr(builder.CreateICmpSLT(next_j, cols), column_loop, row_end);

  builder.SetInsertPoint(row_end);
  llvm::Value* next_i = builder.CreateAdd(i, builder.getInt64(1));
  i->addIncoming(next_i, row_end);
  builder.CreateCondBr(builder.CreateICmpSLT(next_i, rows), row_loop, done);

  builder.SetInsertPoint(done);
  builder.CreateRetVoid();
  verify_generated_module(*module, "emit_epilogue");
  return module;
}

}  // namespace orthojit::cpu
