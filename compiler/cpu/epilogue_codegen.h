// Emits the product epilogue as LLVM IR, specialized to its constants and types:
//
//   void NAME(const float* acc, int64 acc_stride, const C* c, int64 c_stride, D* d, int64 d_stride,
//             int64 rows, int64 cols, int64 diagonal)
//   d[i][j] = round_D(α·acc[i][j] + β·c[i][j] + (j == i + diagonal ? γ : 0))
//
// (`diagonal` = the tile's first row minus its first column, so γ lands on the matrix diagonal.)
// α, β and γ are baked in; C is absent when β = 0. Rows are contiguous (column stride 1). The
// conversion to bf16 is written out (round-to-nearest-even on the bit pattern, NaN kept) so it
// vectorizes on every ISA path; f16 uses LLVM's fptrunc (F16C's vcvtps2ph where present). The
// loop is scalar IR; LLVM's loop vectorizer widens it for the target (acc is the GEMM's own f32
// accumulator, never D, but the pointers are not marked noalias: the vectorizer checks at run time).
#pragma once

#include <memory>
#include <string>

#include "cpu/cpu_isa.h"
#include "support/scalar_type.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace orthojit::cpu {

struct EpilogueSpec {
  CpuIsa isa = CpuIsa::Generic;
  float alpha = 1, beta = 0, gamma = 0;
  bool has_c = false;
  ScalarType c_type = ScalarType::F32, d_type = ScalarType::F32;
  std::string name() const;  // unique per (isa, α, β, types)
};

using EpilogueFunction = void (*)(const float*, int64_t, const void*, int64_t, void*, int64_t, int64_t, int64_t, int64_t);

std::unique_ptr<llvm::Module> emit_epilogue(const EpilogueSpec& spec, llvm::LLVMContext& context);

}  // namespace orthojit::cpu
