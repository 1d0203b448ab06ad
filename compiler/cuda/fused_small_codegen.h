// The fully fused kernel for small matrices: the whole standard or gram iteration of one matrix in
// one CTA (one CTA per matrix of the batch, one launch for the whole program). Derived from the
// same scheduled IR as generate_cuda: every node becomes a CTA-wide phase, phases are separated by
// __syncthreads().
//
//   normalize: f32 (or f64) block reduction of the sum of squares in a fixed order, then scale
//              and cast (the eps / safety / mode of generate_cuda).
//   gemm:      oj::cta_product (kernels/cuda/orthojit_device.cuh): TILE x TILE output tiles dealt
//              round-robin to the warps, m16n8k16 MMAs with fragments loaded straight from where
//              the operands live (shared or global, strides baked in, transposed views free),
//              epilogue α·acc + β·C + γ·I rounded once; symmetric results compute the upper tiles
//              and store the mirror.
//   lincomb / output: element-wise loops over the CTA's threads.
//   Muon step (ir/muon_step.h): the normalize phase computes M ← momentum(M, g) and U (never
//              stored) from the argument block's pointers; the last X's producer writes
//              p ← p·decay − step·X into the parameter (an update it cannot take is its own phase),
//              so the whole step of every matrix is this one launch.
//
// Storage: every planned buffer of at most 128·128 elements per matrix (the m x m values A, B, R,
// Z, Q) lives in dynamic shared memory, rows padded so fragment loads are bank-conflict free;
// larger buffers (the m x n iterate X) go to shared memory too when the budget still has room,
// else stay in global memory (L2-resident at these sizes) and are kernel arguments.
#pragma once

#include <string>

#include "cuda/cuda_codegen.h"
#include "ir/function.h"

namespace orthojit::cuda {

struct FusedSmallOptions {
  int threads = 256;  // per CTA: a power of two, 64..1024
  // Dynamic shared memory one CTA may use. Default: A100's opt-in limit (163 KiB), so the kernel
  // runs on sm_80 and newer; H100/H200 allow 227 KiB (232448 bytes).
  int shared_memory_limit = 163 * 1024;
  int warp_tile = 0;  // output tile per warp (16 or 32); 0: 32 when m > 64, else 16
};

// The largest oriented row count (m, with m <= n) the fused kernel accepts.
inline constexpr int64_t kFusedSmallMaxRows = 128;

// Empty when generate_fused_small_cuda can compile `scheduled` (oriented rows <= 128, 16-bit
// product operands, the m x m buffers fit the shared-memory budget, ...); otherwise why not.
std::string fused_small_ineligible_reason(const ir::Function& scheduled, const FusedSmallOptions& options = {});

// One kernel "fused_<program>", one Launch: grid {batch, 1, 1}, block options.threads,
// dynamic_shared_bytes set; args Input, Output (a Muon step: StepArgs), then the buffers left in
// global memory.
// Throws std::invalid_argument (with the reason above) for an ineligible function.
CudaProgram generate_fused_small_cuda(const ir::Function& scheduled, const FusedSmallOptions& options = {});

}  // namespace orthojit::cuda
