// The host loops around a vendor library's product (OpenBLAS, oneDNN): widening 16-bit operands
// to f32, copying C into the output, mirroring a triangle, and the epilogue. They run on the
// executable's thread pool, split by rows, with unit-stride inner loops where the layout allows
// (GCC vectorizes those at -O3), so that a vendor candidate is timed as the library plus what
// any careful caller of it must add, not plus single-threaded scalar loops.
#pragma once

#include <cstdint>
#include <functional>

#include "cpu/aligned_buffer.h"
#include "cpu/gemm_driver.h"
#include "cpu/thread_pool.h"

namespace orthojit::cpu {

// A matrix as a BLAS call takes it: f32 storage, row-major with leading dimension `ld`, or the
// transpose of such a matrix (`transposed`: the call passes Trans).
struct F32Operand {
  const float* data = nullptr;
  int64_t ld = 0;
  bool transposed = false;
};

// The view itself when it is f32 with a unit stride (row- or column-major: no copy), else an f32
// copy in `scratch` (bf16 and f16 widen exactly). A view whose rows are contiguous is copied row by
// row, one whose columns are contiguous (a transposed view) is copied in its storage order and
// returned transposed, so both copies stream; other strides gather.
F32Operand f32_operand(const MatrixView& view, AlignedBuffer& scratch, ThreadPool* pool);

// out[i·ld + j] = C(i, j) in f32 for all rows, or j >= i only (`upper`).
void copy_to_f32(const MatrixView& c, float* out, int64_t ld, bool upper, ThreadPool* pool);

// Copies the strict upper triangle of the n×n matrix at acc (leading dimension ld) onto the lower
// one, in 64×64 blocks (a row of the lower triangle reads a column of the upper one).
void mirror_upper_to_lower(float* acc, int64_t n, int64_t ld, ThreadPool* pool);

// D = α·acc + β·C + γ·I in f32, rounded once to D's type (the JIT epilogue's semantics); acc is
// m×n with leading dimension ld; C and γ from the problem.
void store_epilogue(const float* acc, int64_t ld, const GemmProblem& problem, ThreadPool* pool);

// D(i, i) += γ for an f32 D that already holds α·A·B + β·C.
void add_to_diagonal(const MatrixView& d, float gamma);

// body(begin, end) over row chunks of [0, rows) on the pool (inline without one).
void for_row_chunks(ThreadPool* pool, int64_t rows, const std::function<void(int64_t, int64_t)>& body);

}  // namespace orthojit::cpu
