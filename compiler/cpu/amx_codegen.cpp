// AMX-BF16 microkernel IR emission; the contract and the tile assignment are in the header.
#include "cpu/amx_codegen.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/amx_emulator.h"
#include "cpu/amx_packing.h"
#include "cpu/llvm_jit.h"

namespace orthojit::cpu {
namespace {

// The tile registers of the kernel: four accumulators, two A tiles, two B tiles (all eight).
constexpr int kCTile = 0;  // C(i, j) in tmm(2i + j)
constexpr int kATile = 4;  // A(i) in tmm(4 + i)
constexpr int kBTile = 6;  // B(j) in tmm(6 + j)

// The tile operations on fixed registers, either as the AMX instructions (LLVM's tile-number
// intrinsics: llvm.x86.tileloadd64, llvm.x86.tdpbf16ps, ... with the register as an immediate,
// and the kernel's own LDTILECFG) or as calls to the emulator (a register is an EmulatedTile on
// the stack). Fixed registers, not LLVM's x86_amx values, so that the instructions, their order
// and their registers are exactly the ones written here and the emulator runs the same sequence.
// (Whether LLVM's own allocation costs anything was measured afterwards with hand-written
// intrinsics: the order below with B1 in B0's register, as LLVM allocates it, ran at the same
// 2.40 TFLOP/s as with eight distinct registers; an earlier reading of half the rate came from
// misaligned benchmark buffers.)
class TileOps {
 public:
  TileOps(llvm::Module& module, llvm::IRBuilder<>& builder, bool emulated, bool fp16)
      : module_(module), builder_(builder), emulated_(emulated), fp16_(fp16) {
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
      dot_ = declare(fp16 ? "orthojit_amx_emulated_tdpfp16ps" : "orthojit_amx_emulated_tdpbf16ps", {ptr, ptr, ptr, i64, i64, i64});
    }
  }

  // At the entry: the emulated registers' storage, or LDTILECFG of the configuration that gives
  // register t `rows[t]` rows of `colsb[t]` bytes (Intel SDM vol. 1, "Tile Configuration": palette
  // 1 at byte 0, the bytes per row of tmm0-15 as 16-bit values from byte 16, their rows from byte
  // 48; unused registers 0 x 0).
  void configure(const int (&rows)[8], const int (&colsb)[8]) {
    if (emulated_) {
      for (auto& slot : slots_) {
        llvm::AllocaInst* tile = builder_.CreateAlloca(llvm::ArrayType::get(builder_.getInt8Ty(), sizeof(EmulatedTile)), nullptr, "tile");
        tile->setAlignment(llvm::Align(64));
        slot = tile;
      }
      return;
    }
    std::vector<uint8_t> bytes(64, 0);
    bytes[0] = 1;
    for (int t = 0; t < 8; ++t) {
      bytes[static_cast<size_t>(16 + 2 * t)] = static_cast<uint8_t>(colsb[t] & 0xff);
      bytes[static_cast<size_t>(17 + 2 * t)] = static_cast<uint8_t>(colsb[t] >> 8);
      bytes[static_cast<size_t>(48 + t)] = static_cast<uint8_t>(rows[t]);
    }
    auto* data = llvm::ConstantDataArray::get(module_.getContext(), bytes);
    auto* config = new llvm::GlobalVariable(module_, data->getType(), true, llvm::GlobalValue::PrivateLinkage, data, "tile_config");
    config->setAlignment(llvm::Align(64));
    builder_.CreateIntrinsic(llvm::Intrinsic::x86_ldtilecfg, {}, {config});
  }
  void release() {
    if (!emulated_) builder_.CreateIntrinsic(llvm::Intrinsic::x86_tilerelease, {}, {});
  }

  void zero(int tile, int rows, int colsb) {
    if (emulated_) {
      builder_.CreateCall(zero_, {slot(tile), i64(rows), i64(colsb)});
      return;
    }
    builder_.CreateIntrinsic(llvm::Intrinsic::x86_tilezero, {}, {i8(tile)});
  }
  // streaming: TILELOADDT1, the load with the hint that the data will not be reused soon (B,
  // read once per A panel), so that it displaces less of the A panel from L1 (measured at kc =
  // 512: 2.57 TFLOP/s against 2.19 with plain loads). The same values either way.
  void load(int tile, int rows, int colsb, llvm::Value* address, llvm::Value* stride, bool streaming = false) {
    if (emulated_) {
      builder_.CreateCall(load_, {slot(tile), i64(rows), i64(colsb), address, stride});
      return;
    }
    builder_.CreateIntrinsic(streaming ? llvm::Intrinsic::x86_tileloaddt164 : llvm::Intrinsic::x86_tileloadd64, {}, {i8(tile), address, stride});
  }
  void store(int tile, int rows, int colsb, llvm::Value* address, llvm::Value* stride) {
    if (emulated_) {
      builder_.CreateCall(store_, {slot(tile), i64(rows), i64(colsb), address, stride});
      return;
    }
    builder_.CreateIntrinsic(llvm::Intrinsic::x86_tilestored64, {}, {i8(tile), address, stride});
  }
  // c += a·b: m rows, n bytes of C per row, k bytes of A per row (the emulator checks the shapes
  // the configuration gives the hardware).
  void dot(int c, int a, int b, int m, int n, int k) {
    if (emulated_) {
      builder_.CreateCall(dot_, {slot(c), slot(a), slot(b), i64(m), i64(n), i64(k)});
      return;
    }
    builder_.CreateIntrinsic(fp16_ ? llvm::Intrinsic::x86_tdpfp16ps : llvm::Intrinsic::x86_tdpbf16ps, {}, {i8(c), i8(a), i8(b)});
  }

 private:
  llvm::Value* slot(int tile) const { return slots_[static_cast<size_t>(tile)]; }
  llvm::Value* i8(int value) { return builder_.getInt8(static_cast<uint8_t>(value)); }
  llvm::Value* i64(int64_t value) { return builder_.getInt64(static_cast<uint64_t>(value)); }
  llvm::Module& module_;
  llvm::IRBuilder<>& builder_;
  bool emulated_, fp16_;
  llvm::Value* slots_[8] = {};
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
  llvm::Value* next_a = &*arg++;  // the FMA kernels' lda: here the address of the A panel the next call reads
  llvm::Value* panels = &*arg++;
  a_panel->setName("a_panel");
  b_panels->setName("b_panels");
  c->setName("c");
  ldc->setName("ldc");
  accumulate->setName("accumulate");
  panels->setName("panels");

  auto* entry = llvm::BasicBlock::Create(context, "entry", function);
  auto* exit = llvm::BasicBlock::Create(context, "exit", function);
  TileOps tiles(*module, builder, spec.amx_emulated, spec.amx_fp16);

  // Tile shapes: row tiles of A/C (16 and m_valid - 16 rows), column tiles of B/C (bytes).
  std::vector<int> tile_rows, tile_colsb;
  for (int t = 0; t * kAmxTile < spec.m_valid; ++t) tile_rows.push_back(std::min(kAmxTile, spec.m_valid - t * kAmxTile));
  for (int t = 0; t * kAmxTile < spec.n_valid; ++t) tile_colsb.push_back(4 * std::min(kAmxTile, spec.n_valid - t * kAmxTile));
  const int64_t steps = spec.kc / kAmxKStep;
  const int64_t panel_bytes = 2 * amx_panel_elements(spec.kc);

  builder.SetInsertPoint(entry);
  {
    int rows[8] = {}, colsb[8] = {};
    for (size_t i = 0; i < tile_rows.size(); ++i) {
      rows[kATile + i] = tile_rows[i];
      colsb[kATile + i] = 64;
      for (size_t j = 0; j < tile_colsb.size(); ++j) {
        rows[kCTile + 2 * i + j] = tile_rows[i];
        colsb[kCTile + 2 * i + j] = tile_colsb[j];
      }
    }
    for (size_t j = 0; j < tile_colsb.size(); ++j) {
      rows[kBTile + j] = kAmxTile;
      colsb[kBTile + j] = tile_colsb[j];
    }
    tiles.configure(rows, colsb);
  }
  llvm::Value* c_stride = builder.CreateMul(ldc, builder.getInt64(4), "c_stride_bytes");
  llvm::Value* tile_stride = builder.getInt64(64);
  llvm::Value* next_a_panel = builder.CreateIntToPtr(next_a, ptr, "next_a_panel");
  // A tile t of step s: at (2s + t) KiB of the packed panel, 64-byte rows.
  auto a_tile_address = [&](int64_t s, int64_t t) {
    return builder.CreateInBoundsGEP(i8, a_panel, builder.getInt64(static_cast<uint64_t>((s * 2 + t) * kAmxTileBytes)));
  };
  auto c_tile_of = [&](size_t i, size_t j) { return kCTile + static_cast<int>(2 * i + j); };
  // Where panel p's B panel and C microtile start (p an i64 value).
  auto b_panel_of = [&](llvm::Value* p) { return builder.CreateInBoundsGEP(i8, b_panels, builder.CreateMul(p, builder.getInt64(static_cast<uint64_t>(panel_bytes))), "b_panel"); };
  auto c_microtile_of = [&](llvm::Value* p) { return builder.CreateInBoundsGEP(i8, c, builder.CreateMul(p, builder.getInt64(4 * kAmxMicrotile)), "c_microtile"); };
  // C tile (i, j) of a microtile starts at (16i·ldc + 16j) floats.
  auto c_address = [&](llvm::Value* c_tile, size_t i, size_t j) {
    llvm::Value* offset = builder.CreateAdd(builder.CreateMul(c_stride, builder.getInt64(16 * i)), builder.getInt64(64 * j));
    return builder.CreateInBoundsGEP(i8, c_tile, offset);
  };
  // The next call's A panel (kc lines of 64 bytes) is prefetched into L2 over this call: four
  // lines per step, panel p taking lines [(p mod 8)·4·steps, ...), so a call over 8 or more
  // B panels touches all of them. Without it every call starts by waiting for its A panel from
  // L3 (32 KiB, about as long as the call's products on the machines measured).
  llvm::Function* prefetch = llvm::Intrinsic::getDeclaration(module.get(), llvm::Intrinsic::prefetch, {ptr});
  auto prefetch_step = [&](llvm::Value* p, int64_t s) {
    llvm::Value* base = builder.CreateInBoundsGEP(i8, next_a_panel, builder.CreateMul(builder.CreateAnd(p, builder.getInt64(7)), builder.getInt64(static_cast<uint64_t>(steps * 4 * 64))));
    for (int64_t q = 0; q < 4; ++q)
      builder.CreateCall(prefetch, {builder.CreateInBoundsGEP(i8, base, builder.getInt64(static_cast<uint64_t>((s * 4 + q) * 64))), builder.getInt32(0),
                                    builder.getInt32(2), builder.getInt32(1)});
  };
  // One 32-k step of a panel: per step the order B0, A0, C00, A1, C10, B1, C01, C11: a load waits
  // for the product of the previous step still reading its register, so the loads go between the
  // products that do not need them and the TMUL stays busy while B streams from L2 (measured on
  // Sapphire Rapids, one core, A in L1 and B from a 1 MiB block: 2.78 TFLOP/s with the four loads
  // first, 3.04 interleaved; docs/cpu-backend.md). `before_product(i, j)` runs just before the
  // product into C(i, j): the panel transition puts the previous panel's store of that tile and
  // this panel's zeroing or load of it there.
  auto step = [&](llvm::Value* p, llvm::Value* b_panel, int64_t s, const std::function<void(size_t, size_t)>& before_product) {
    prefetch_step(p, s);
    auto load_a = [&](size_t i) { tiles.load(kATile + static_cast<int>(i), tile_rows[i], 64, a_tile_address(s, static_cast<int64_t>(i)), tile_stride); };
    auto load_b = [&](size_t j) {
      tiles.load(kBTile + static_cast<int>(j), kAmxTile, tile_colsb[j],
                 builder.CreateInBoundsGEP(i8, b_panel, builder.getInt64(static_cast<uint64_t>((s * 2 + static_cast<int64_t>(j)) * kAmxTileBytes))), tile_stride,
                 true);
    };
    auto product = [&](size_t i, size_t j) {
      if (before_product) before_product(i, j);
      tiles.dot(c_tile_of(i, j), kATile + static_cast<int>(i), kBTile + static_cast<int>(j), tile_rows[i], tile_colsb[j], 64);
    };
    load_b(0);
    for (size_t i = 0; i < tile_rows.size(); ++i) {
      load_a(i);
      product(i, 0);
    }
    for (size_t j = 1; j < tile_colsb.size(); ++j) {
      load_b(j);
      for (size_t i = 0; i < tile_rows.size(); ++i) product(i, j);
    }
  };
  // The panels are software-pipelined: a panel's C tiles go to memory one by one inside the next
  // panel's first step, each just before the next panel's first product into the same register,
  // so that the TMUL works on the other three tiles while a finished one drains and refills
  // (without: the TMUL waited for all four stores and loads at every panel, 19% of the kernel's
  // time at kc = 512, measured by leaving the loads out; docs/cpu-backend.md). No tile value
  // crosses a block boundary in the IR (the registers are immediates), so nothing is carried
  // through phis but the panel index. Two copies of the loop: C zeroed (the first K block) or
  // loaded from the accumulator.
  auto pipelined_loop = [&](llvm::BasicBlock* start, bool load_c) {
    const char* tag = load_c ? "_loaded" : "_zeroed";
    auto* loop = llvm::BasicBlock::Create(context, std::string("panel_loop") + tag, function);
    auto* transition = llvm::BasicBlock::Create(context, std::string("next_panel") + tag, function);
    auto* last = llvm::BasicBlock::Create(context, std::string("last_panel") + tag, function);
    auto init = [&](llvm::Value* c_tile, size_t i, size_t j) {
      if (load_c) tiles.load(c_tile_of(i, j), tile_rows[i], tile_colsb[j], c_address(c_tile, i, j), c_stride);
      else tiles.zero(c_tile_of(i, j), tile_rows[i], tile_colsb[j]);
    };
    // Panel 0: its tiles initialised, its first step.
    builder.SetInsertPoint(start);
    llvm::Value* zero = builder.getInt64(0);
    llvm::Value* c_first = c_microtile_of(zero);
    step(zero, b_panel_of(zero), 0, [&](size_t i, size_t j) { init(c_first, i, j); });
    builder.CreateBr(loop);
    // Panel p: the steps after the first, then either the transition into p + 1 or the last stores.
    builder.SetInsertPoint(loop);
    llvm::PHINode* panel = builder.CreatePHI(i64, 2, "panel");
    panel->addIncoming(zero, start);
    llvm::Value* b_panel = b_panel_of(panel);
    for (int64_t s = 1; s < steps; ++s) step(panel, b_panel, s, nullptr);
    llvm::Value* next = builder.CreateAdd(panel, builder.getInt64(1), "panel_next");
    builder.CreateCondBr(builder.CreateICmpSLT(next, panels), transition, last);
    builder.SetInsertPoint(transition);
    llvm::Value* c_tile = c_microtile_of(panel);
    llvm::Value* c_next = c_microtile_of(next);
    step(next, b_panel_of(next), 0, [&](size_t i, size_t j) {
      tiles.store(c_tile_of(i, j), tile_rows[i], tile_colsb[j], c_address(c_tile, i, j), c_stride);
      init(c_next, i, j);
    });
    panel->addIncoming(next, transition);
    builder.CreateBr(loop);
    builder.SetInsertPoint(last);
    llvm::Value* c_last = c_microtile_of(panel);
    for (size_t i = 0; i < tile_rows.size(); ++i)
      for (size_t j = 0; j < tile_colsb.size(); ++j) tiles.store(c_tile_of(i, j), tile_rows[i], tile_colsb[j], c_address(c_last, i, j), c_stride);
    builder.CreateBr(exit);
  };
  auto* dispatch = llvm::BasicBlock::Create(context, "dispatch", function);
  auto* from_zero = llvm::BasicBlock::Create(context, "first_k_block", function);
  auto* from_c = llvm::BasicBlock::Create(context, "later_k_block", function);
  builder.CreateCondBr(builder.CreateICmpSGT(panels, builder.getInt64(0)), dispatch, exit);
  builder.SetInsertPoint(dispatch);
  builder.CreateCondBr(builder.CreateICmpNE(accumulate, builder.getInt32(0)), from_c, from_zero);
  pipelined_loop(from_zero, false);
  pipelined_loop(from_c, true);

  builder.SetInsertPoint(exit);
  tiles.release();
  builder.CreateRetVoid();

  verify_generated_module(*module, "emit_amx_microkernel");
  return module;
}

std::string amx_kernel_assembly(MicrokernelSpec spec) {
  spec.amx_emulated = false;
  llvm::LLVMContext context;
  auto module = emit_amx_microkernel(spec, context);
  // AMX-FP16 arrived with Granite Rapids (Intel ISA Extensions Programming Reference).
  return assembly_for_cpu(*module, spec.amx_fp16 ? "graniterapids" : "sapphirerapids");
}

}  // namespace orthojit::cpu
