// The blocked GEMM around the JIT-compiled microkernel (the BLIS loop nest), with the epilogue
// D = α·A·B + β·C + γ·I fused at microtile granularity and triangular computation of symmetric
// results. Blocking sizes are data (the autotuner sets them). Layout math lives here, in host
// code, and is tested on its own.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "cpu/cpu_isa.h"
#include "cpu/epilogue_codegen.h"
#include "cpu/microkernel_codegen.h"
#include "cpu/thread_pool.h"
#include "support/scalar_type.h"

namespace orthojit::cpu {

// A strided matrix window over typed storage: element (i, j) at data[i·row_stride + j·col_stride].
struct MatrixView {
  void* data = nullptr;
  ScalarType type = ScalarType::F32;
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 1;
  MatrixView transposed() const { return {data, type, cols, rows, col_stride, row_stride}; }
};

struct GemmBlocking {
  // An MC x KC block of A (216 KiB) and a KC x NC block of B (1.5 MiB) in L2, a KC x NR micro-panel of
  // B (48 KiB) near L1. Chosen by measurement on the development machine (5% faster than
  // 192/256/1024 on Newton–Schulz 1024x4096, bench/RESULTS.md); the autotuner will choose per shape
  // (ORTHOJIT_CPU_BLOCKING=MC,KC,NC overrides it meanwhile).
  int64_t mc = 144, kc = 384, nc = 1024;  // multiples of MR / any / multiples of NR (rounded up)
  bool bf16_dot = false;  // the vdpbf16ps kernel for bf16 x bf16 products: see uses_bf16_dot
  // f32 row-major operands up to this size are read in place by the microkernel instead of
  // being packed (0: always pack). 512 KiB: both operands of a per-head product stay in L2.
  int64_t direct_operand_bytes = 512 * 1024;
  int b_prefetch = 16;  // the microkernel's B prefetch distance in k steps (MicrokernelSpec)
  // The AMX path's K block (a multiple of 32; the FMA path's kc does not apply): each kernel call
  // runs kc/32 unrolled tile steps with its C tiles in registers. 512: the 32 KiB A panel stays
  // in L1 while B streams past it (measured on Sapphire Rapids: 2.57 TFLOP/s of 3.37 in the
  // kernel, against 2.19 at 256 and 1.74 at 1024; docs/cpu-backend.md).
  int64_t amx_kc = 512;
  // The AMX path packs B in sweeps of column blocks of at most this many bytes (docs/cpu-backend.md).
  int64_t amx_sweep_bytes = int64_t{64} << 20;
  // f16 x f16 products on the tiles too (TDPFP16PS), on the amx path: set by the executable where
  // the CPU reports AMX-FP16 (Granite Rapids on; HostCpu::amx_fp16), by tests with emulated kernels.
  bool amx_fp16 = false;
};

// void kernel(const float* a_panel, const float* b_panel, float* c, int64 ldc, int32 accumulate,
//             int64 lda, int64 ldb)   (microkernel_codegen.h)
using MicrokernelFunction = void (*)(const float*, const float*, float*, int64_t, int32_t, int64_t, int64_t);

struct GemmProblem {
  MatrixView a, b;              // (M, K), (K, N)
  std::optional<MatrixView> c;  // (M, N), never the same storage as d
  MatrixView d;                 // (M, N)
  float alpha = 1, beta = 0, gamma = 0;
  bool triangular = false;  // d is symmetric: compute the upper triangle's microtiles, mirror
  // The JIT-compiled epilogue for (α, β, γ, types); null: the host loop (tests, odd strides).
  EpilogueFunction epilogue = nullptr;
};

// Leading dimension of the f32 accumulator for n columns: padded by 64 bytes so that the rows of
// a microtile do not all map to the same L1 set (power-of-two row lengths otherwise make the 12
// rows of a tile conflict: measured 10-15% of the GEMM's time on this machine).
inline int64_t accumulator_stride(int64_t n) { return (n + 15) / 16 * 16 + 16; }

// The K-block lengths a product of inner dimension k uses: kc, and the remainder if any (rounded
// up to even with bf16 dot products, whose packing zero-pads the odd k).
std::vector<int64_t> k_block_lengths(int64_t k, const GemmBlocking& blocking, bool bf16_dot = false);

// Whether a product may run on bf16 dot products (vdpbf16ps): both operands stored as bf16 on the
// avx512bf16 path, with GemmBlocking::bf16_dot set. The driver's default is off; the runtime sets it
// where the instruction measured faster than f32 FMAs (cpu/bf16_engine.h: 2x on Zen 4, 0.5x on
// Sapphire Rapids), a tuning record where its winner used it.
inline bool uses_bf16_dot(CpuIsa isa, bool enabled, const MatrixView& a, const MatrixView& b) {
  return enabled && isa == CpuIsa::Avx512Bf16 && a.type == ScalarType::BF16 && b.type == ScalarType::BF16;
}

// Whether a product runs on the AMX tile unit (amx_codegen.h): both operands stored as bf16 on
// the amx path, or both as f16 with `fp16` (GemmBlocking::amx_fp16: the CPU has AMX-FP16). Its
// result is the same product (16-bit operands, f32 accumulation) as the FMA kernels', in a
// different summation order. f32 products, and f16 ones without AMX-FP16, stay on FMAs.
inline bool uses_amx(CpuIsa isa, bool fp16, const MatrixView& a, const MatrixView& b) {
  if (isa != CpuIsa::AmxBf16 || a.type != b.type) return false;
  return a.type == ScalarType::BF16 || (fp16 && a.type == ScalarType::F16);
}

// Which operands a product reads in place ("direct", see microkernel_codegen.h) instead of packing:
// unit column stride and at most blocking.direct_operand_bytes, then f32 A and B, or on bf16 dot
// products a bf16 A with an even K (a row's pair (k, k+1) is already the 32-bit word the kernel
// broadcasts; an odd K would need a zero past the row's end). A bf16 B is always packed (its pairs
// interleave two rows), and so is Xᵀ (a transposed view).
//
// On the f32 FMA kernels, a 16-bit operand (bf16, f16) whose f32 copy fits the same size is first
// widened whole into an f32 copy in its own layout (rows or, for Xᵀ, columns contiguous; `widened`),
// and that copy is then read in place or packed as an f32 operand would be. A small product's
// packing is not amortized over many microtiles, and the 16-bit packs are transposes with a
// conversion per element; the widening is a contiguous vector loop (and the 16-bit value widened
// to f32 is exact, so the sums are the packed path's bit for bit).
struct OperandLayouts {
  bool a_direct = false, b_direct = false;
  bool a_widened = false, b_widened = false;
};
OperandLayouts choose_operand_layouts(CpuIsa isa, const GemmBlocking& blocking, const MatrixView& a, const MatrixView& b);

// The microkernels a product of these operands runs (one per K-block length); the executable
// compiles them before the first run.
std::vector<MicrokernelSpec> microkernels_for(CpuIsa isa, const GemmBlocking& blocking, const MatrixView& a, const MatrixView& b);

// Which microtiles a triangular product computes: those with a column reaching the diagonal
// (row0 <= col0 + NR - 1). Exposed for the host tests of the tile map.
inline bool microtile_needed(int64_t row0, int64_t col0, int nr, bool triangular) { return !triangular || row0 <= col0 + nr - 1; }

// The stages of a product on the FMA kernels (GemmDriver::run): one per (K block, column block),
// K blocks outer. Stage `index` reads packed A from buffer a_buffer (K blocks alternate) and packed
// B from b_buffer (stages alternate); the phase that runs stage s also packs stage s+1's operands
// (its A only when it starts a K block: packs_a), so stage s+1's buffers must differ from stage
// s's wherever s+1 packs. Exposed for the host test of that rule.
struct PipelineStage {
  int64_t k_block = 0, column_block = 0;
  int a_buffer = 0, b_buffer = 0;
  bool packs_a = false;
};
PipelineStage pipeline_stage(int64_t index, int64_t column_blocks);

class GemmDriver {
 public:
  // kernel_for returns the compiled microkernel of a spec (the driver fills in every field).
  GemmDriver(CpuIsa isa, GemmBlocking blocking, std::function<MicrokernelFunction(const MicrokernelSpec&)> kernel_for);
  // Runs on `pool` (or on the calling thread alone when pool is null).
  void run(const GemmProblem& problem, ThreadPool* pool) const;
  const GemmBlocking& blocking() const { return blocking_; }

 private:
  void run_amx(const GemmProblem& problem, ThreadPool* pool) const;  // uses_amx products
  void run_fma(const GemmProblem& problem, ThreadPool* pool) const;  // f32 FMA or vdpbf16ps products
  void mirror_if_triangular(const GemmProblem& problem, ThreadPool* pool) const;
  CpuIsa isa_;
  IsaTraits traits_;
  GemmBlocking blocking_;
  std::function<MicrokernelFunction(const MicrokernelSpec&)> kernel_for_;
};

}  // namespace orthojit::cpu
