// AMX-BF16 microkernel IR emission; the contract and the tile assignment are in the header.
#include "cpu/amx_codegen.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/amx_emulator.h"
#include "cpu/amx_packing.h"
#include "cpu/llvm_jit.h"

namespace orthojit::cpu {
namespace {

// The four tile operations, either as the AMX intrinsics (a tile is an x86_amx SSA value) or as
// calls to the emulator (a tile is a pointer to an EmulatedTile on the stack; an operation that
// "produces" a tile writes the buffer it is given).
class TileOps {
 public:
  TileOps(llvm::Module& module, llvm::IRBuilder<>& builder, bool emulated) : module_(module), builder_(builder), emulated_(emulated) {
    llvm::Type* i64 = builder.getInt64Ty();
    llvm::Type* ptr = builder.getPtrTy();
    llvm::Type* void_type = builder.getVoidTy();
    if (emulated) {
      auto declare = [&](const char* name, std::vector<llvm::Type*> parameters) {
        return module.getOrInsertFunction(name, llvm::FunctionType::get(void_type, parameters, false));
      };
      zero_ = declare("orthojit_amx_emulated_tilezero", {ptr, i64, i64});
      load_ = declare("orthojit_amx_emulated_tileloadd", {ptr, i64, i64, ptr, i64});
      store_ = declare("orthojit_amx_emulated_tilestored", {ptr, i64, i64, ptr, i64});
      dot_ = declare("orthojit_amx_emulated_tdpbf16ps", {ptr, ptr, ptr, i64, i64, i64});
    }
  }

  // An emulated tile's storage (in the entry block); null for the native tiles.
  llvm::Value* slot(llvm::BasicBlock* entry) {
    if (!emulated_) return nullptr;
    llvm::IRBuilder<> at_entry(entry, entry->begin());
    llvm::AllocaInst* tile = at_entry.CreateAlloca(llvm::ArrayType::get(at_entry.getInt8Ty(), sizeof(EmulatedTile)), nullptr, "tile");
    tile->setAlignment(llvm::Align(64));
    return tile;
  }

  llvm::Value* zero(llvm::Value* slot, int rows, int colsb) {
    if (emulated_) {
      builder_.CreateCall(zero_, {slot, i64(rows), i64(colsb)});
      return slot;
    }
    return builder_.CreateIntrinsic(llvm::Intrinsic::x86_tilezero_internal, {}, {i16(rows), i16(colsb)});
  }
  llvm::Value* load(llvm::Value* slot, int rows, int colsb, llvm::Value* address, llvm::Value* stride) {
    if (emulated_) {
      builder_.CreateCall(load_, {slot, i64(rows), i64(colsb), address, stride});
      return slot;
    }
    return builder_.CreateIntrinsic(llvm::Intrinsic::x86_tileloadd64_internal, {}, {i16(rows), i16(colsb), address, stride});
  }
  void store(llvm::Value* tile, int rows, int colsb, llvm::Value* address, llvm::Value* stride) {
    if (emulated_) {
      builder_.CreateCall(store_, {tile, i64(rows), i64(colsb), address, stride});
      return;
    }
    builder_.CreateIntrinsic(llvm::Intrinsic::x86_tilestored64_internal, {}, {i16(rows), i16(colsb), address, stride, tile});
  }
  // c + a·b: m rows, n bytes of C per row, k bytes of A per row.
  llvm::Value* dot(llvm::Value* c, llvm::Value* a, llvm::Value* b, int m, int n, int k) {
    if (emulated_) {
      builder_.CreateCall(dot_, {c, a, b, i64(m), i64(n), i64(k)});
      return c;
    }
    return builder_.CreateIntrinsic(llvm::Intrinsic::x86_tdpbf16ps_internal, {}, {i16(m), i16(n), i16(k), c, a, b});
  }

 private:
  llvm::Value* i16(int value) { return builder_.getInt16(static_cast<uint16_t>(value)); }
  llvm::Value* i64(int64_t value) { return builder_.getInt64(static_cast<uint64_t>(value)); }
  llvm::Module& module_;
  llvm::IRBuilder<>& builder_;
  bool emulated_;
  llvm::FunctionCallee zero_, load_, store_, dot_;
};

}  // namespace

std::unique_ptr<llvm::Module> emit_amx_microkernel(const MicrokernelSpec& spec, llvm::LLVMContext& context) {
  if (!spec.amx) throw std::logic_error("emit_amx_microkernel: not an AMX spec");
  if (spec.kc < kAmxKStep || spec.kc % kAmxKStep != 0) throw std::logic_error("emit_amx_microkernel: kc must be a positive multiple of 32");
  if (spec.m_valid < 1 || spec.m_valid > kAmxMicrotile || spec.n_valid < 1 || spec.n_valid > kAmxMicrotile)
    throw std::logic_error("emit_amx_microkernel: the microtile's rows and columns must be 1..32");
  auto module = std::make_unique<llvm::Module>(spec.name(), context);
  llvm::IRBuilder<> builder(context);
  llvm::Type* i8 = builder.getInt8Ty();
  llvm::Type* i64 = builder.getInt64Ty();
  llvm::Type* ptr = builder.getPtrTy();
  auto* function_type = llvm::FunctionType::get(builder.getVoidTy(), {ptr, ptr, ptr, i64, builder.getInt32Ty(), i64, i64}, false);
  auto* function = llvm::Function::Create(function_type, llvm::Function::ExternalLinkage, spec.name(), module.get());
  function->addFnAttr(llvm::Attribute::NoUnwind);
  auto arg = function->arg_begin();
  llvm::Value* a_panel = &*arg++;
  llvm::Value* b_panels = &*arg++;
  llvm::Value* c = &*arg++;
  llvm::Value* ldc = &*arg++;
  llvm::Value* accumulate = &*arg++;
  ++arg;  // unused (the FMA kernels' lda)
  llvm::Value* panels = &*arg++;
  a_panel->setName("a_panel");
  b_panels->setName("b_panels");
  c->setName("c");
  ldc->setName("ldc");
  accumulate->setName("accumulate");
  panels->setName("panels");

  auto* entry = llvm::BasicBlock::Create(context, "entry", function);
  auto* loop = llvm::BasicBlock::Create(context, "panel_loop", function);
  auto* from_zero = llvm::BasicBlock::Create(context, "first_k_block", function);
  auto* from_c = llvm::BasicBlock::Create(context, "later_k_block", function);
  auto* latch = llvm::BasicBlock::Create(context, "next_panel", function);
  auto* exit = llvm::BasicBlock::Create(context, "exit", function);
  TileOps tiles(*module, builder, spec.amx_emulated);

  // Tile shapes: row tiles of A/C (16 and m_valid - 16 rows), column tiles of B/C (bytes).
  std::vector<int> tile_rows, tile_colsb;
  for (int t = 0; t * kAmxTile < spec.m_valid; ++t) tile_rows.push_back(std::min(kAmxTile, spec.m_valid - t * kAmxTile));
  for (int t = 0; t * kAmxTile < spec.n_valid; ++t) tile_colsb.push_back(4 * std::min(kAmxTile, spec.n_valid - t * kAmxTile));
  const int64_t steps = spec.kc / kAmxKStep;
  const int64_t panel_bytes = 2 * amx_panel_elements(spec.kc);

  builder.SetInsertPoint(entry);
  llvm::Value* c_stride = builder.CreateMul(ldc, builder.getInt64(4), "c_stride_bytes");
  llvm::Value* tile_stride = builder.getInt64(64);
  // Emulated tiles: one buffer per C tile, per A tile and per B tile (all 8 tmm registers).
  std::vector<llvm::Value*> c_slots, a_slots, b_slots;
  for (size_t i = 0; i < tile_rows.size() * tile_colsb.size(); ++i) c_slots.push_back(tiles.slot(entry));
  for (size_t i = 0; i < tile_rows.size(); ++i) a_slots.push_back(tiles.slot(entry));
  for (size_t j = 0; j < tile_colsb.size(); ++j) b_slots.push_back(tiles.slot(entry));
  builder.CreateCondBr(builder.CreateICmpSGT(panels, builder.getInt64(0)), loop, exit);

  builder.SetInsertPoint(loop);
  llvm::PHINode* panel = builder.CreatePHI(i64, 2, "panel");
  panel->addIncoming(builder.getInt64(0), entry);
  llvm::Value* b_panel = builder.CreateInBoundsGEP(i8, b_panels, builder.CreateMul(panel, builder.getInt64(static_cast<uint64_t>(panel_bytes))), "b_panel");
  llvm::Value* c_tile = builder.CreateInBoundsGEP(i8, c, builder.CreateMul(panel, builder.getInt64(4 * kAmxMicrotile)), "c_microtile");
  builder.CreateCondBr(builder.CreateICmpNE(accumulate, builder.getInt32(0)), from_c, from_zero);

  // C tile (i, j) starts at c_tile + (16i·ldc + 16j) floats.
  auto c_address = [&](size_t i, size_t j) {
    llvm::Value* offset = builder.CreateAdd(builder.CreateMul(c_stride, builder.getInt64(16 * i)), builder.getInt64(64 * j));
    return builder.CreateInBoundsGEP(i8, c_tile, offset);
  };
  // The microtile: C tiles zeroed or loaded, kc/32 steps of 2+2 tile loads and 4 products, stored.
  // No tile value crosses a block boundary (each body is straight-line code), so the tile register
  // allocation has nothing to carry through phis.
  auto body = [&](llvm::BasicBlock* block, bool load_c) {
    builder.SetInsertPoint(block);
    std::vector<llvm::Value*> acc(c_slots.size());
    for (size_t i = 0; i < tile_rows.size(); ++i)
      for (size_t j = 0; j < tile_colsb.size(); ++j) {
        const size_t index = i * tile_colsb.size() + j;
        acc[index] = load_c ? tiles.load(c_slots[index], tile_rows[i], tile_colsb[j], c_address(i, j), c_stride)
                            : tiles.zero(c_slots[index], tile_rows[i], tile_colsb[j]);
      }
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<llvm::Value*> a(tile_rows.size()), b(tile_colsb.size());
      for (size_t i = 0; i < tile_rows.size(); ++i)
        a[i] = tiles.load(a_slots[i], tile_rows[i], 64,
                          builder.CreateInBoundsGEP(i8, a_panel, builder.getInt64(static_cast<uint64_t>((s * 2 + static_cast<int64_t>(i)) * kAmxTileBytes))),
                          tile_stride);
      for (size_t j = 0; j < tile_colsb.size(); ++j)
        b[j] = tiles.load(b_slots[j], kAmxTile, tile_colsb[j],
                          builder.CreateInBoundsGEP(i8, b_panel, builder.getInt64(static_cast<uint64_t>((s * 2 + static_cast<int64_t>(j)) * kAmxTileBytes))),
                          tile_stride);
      for (size_t i = 0; i < tile_rows.size(); ++i)
        for (size_t j = 0; j < tile_colsb.size(); ++j) {
          const size_t index = i * tile_colsb.size() + j;
          acc[index] = tiles.dot(acc[index], a[i], b[j], tile_rows[i], tile_colsb[j], 64);
        }
    }
    for (size_t i = 0; i < tile_rows.size(); ++i)
      for (size_t j = 0; j < tile_colsb.size(); ++j)
        tiles.store(acc[i * tile_colsb.size() + j], tile_rows[i], tile_colsb[j], c_address(i, j), c_stride);
    builder.CreateBr(latch);
  };
  body(from_zero, false);
  body(from_c, true);

  builder.SetInsertPoint(latch);
  llvm::Value* next = builder.CreateAdd(panel, builder.getInt64(1), "panel_next");
  panel->addIncoming(next, latch);
  builder.CreateCondBr(builder.CreateICmpSLT(next, panels), loop, exit);
  builder.SetInsertPoint(exit);
  builder.CreateRetVoid();

  verify_generated_module(*module, "emit_amx_microkernel");
  return module;
}

std::string amx_kernel_assembly(MicrokernelSpec spec) {
  spec.amx_emulated = false;
  llvm::LLVMContext context;
  auto module = emit_amx_microkernel(spec, context);
  return assembly_for_cpu(*module, "sapphirerapids");
}

}  // namespace orthojit::cpu
