// Emits the register-blocked GEMM microkernel as LLVM IR:
//
//   void NAME(const float* a_panel,   // packed A: kc steps of MR values   (MR, kc) k-major
//             const float* b_panel,   // packed B: kc steps of NR values   (kc, NR) k-major
//             float* c, int64 ldc,    // the MR x NR tile of the f32 accumulator, row-major
//             int32 accumulate,       // 0: c = A·B   1: c = c + (A·B of this block)
//             int64 lda, int64 ldb)   // row strides of a direct A / B (ignored when packed)
//
// A "direct" operand is read where it lies instead of from a packed panel: A's element (i, k) at
// a + i·lda + k, B's element (k, j) at b + k·ldb + j (row-major, unit column stride; f32, or a
// bf16 A on the bf16_dot kernel, whose row pairs are the words it broadcasts). For small
// matrices packing costs as much as the products themselves (a 128³ product is 65k cycles of
// FMAs; packing its two operands is 20-30k cycles), and their operands sit in L1/L2 anyway.
//
// kc is baked in (shape specialization: a product's K blocks have at most two lengths), so the
// k-loop has a constant trip count that LLVM unrolls. Each k step loads NR/W vectors of B,
// broadcasts MR values of A and issues MR·NR/W fused multiply-adds into accumulators that live in
// registers for the whole loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cpu/cpu_isa.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace orthojit::cpu {

// bf16_dot (AVX512-BF16 only): packed A and B hold bf16 pairs along k, (kc/2, MR, 2) and
// (kc/2, NR, 2), and each pair step issues vdpbf16ps: acc += a₀·b₀ + a₁·b₁ per lane, two
// multiply-adds per f32 lane per instruction, twice the f32 FMA rate. kc is even (zero-padded).
struct MicrokernelSpec {
  CpuIsa isa = CpuIsa::Generic;
  int64_t kc = 0;
  bool bf16_dot = false;
  bool a_direct = false, b_direct = false;  // with bf16_dot: a_direct only (lda in bf16 elements)
  int b_prefetch = 0;  // prefetch B's row this many k steps (pair steps with bf16_dot) ahead; 0: none
  // amx: the AMX-BF16 tile kernel instead (amx_codegen.h): bf16 panels packed by amx_packing.h,
  // kc a multiple of 32, the microtile's valid rows and columns (1..32) baked in, and the last
  // argument the number of 32-column B panels one call sweeps. amx_emulated: the same kernel with
  // every tile instruction a call to the host emulator (amx_emulator.h), compiled for the generic
  // path: the driver's AMX path, packing and remainders tested on CPUs without AMX.
  bool amx = false;
  int m_valid = 32, n_valid = 32;
  bool amx_emulated = false;
  // amx_fp16: the panels hold f16 pairs and each step is TDPFP16PS (AMX-FP16) instead of
  // TDPBF16PS: f16 x f16 products on the tiles where the CPU has AMX-FP16 (GemmBlocking::amx_fp16).
  bool amx_fp16 = false;
  std::string name() const;  // e.g. "orthojit_ukernel_avx512f_12x32_k256"
};

std::unique_ptr<llvm::Module> emit_microkernel(const MicrokernelSpec& spec, llvm::LLVMContext& context);

}  // namespace orthojit::cpu
