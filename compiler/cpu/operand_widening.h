// The product on f32 copies of the small 16-bit operands that OperandLayouts widens
// (gemm_driver.h): a bf16/f16 operand whose f32 copy fits GemmBlocking::direct_operand_bytes is
// widened whole, in its own orientation, instead of being packed with a conversion per element.
#pragma once

#include "cpu/gemm_driver.h"

namespace orthojit::cpu {

// `problem` with layouts.a_widened / b_widened operands replaced by f32 copies in this thread's
// scratch (valid until its next call), widened on `pool` (or the calling thread when null). The
// copies have the direct layouts choose_operand_layouts gave the originals (std::logic_error if not).
GemmProblem widened_operands(CpuIsa isa, const GemmBlocking& blocking, const GemmProblem& problem, const OperandLayouts& layouts, ThreadPool* pool);

}  // namespace orthojit::cpu
