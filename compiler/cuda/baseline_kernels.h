// The small NVRTC kernels the vendor-library baselines (cuBLAS, cuBLASLt) share around their
// products: the Frobenius normalization (sum of squares, then scale and cast to 16-bit storage,
// transposing a tall input), the f32 output (transposing back), and D += γ·I on the diagonal of
// m x m matrices (the a·I term of Gram's Z = c·R² + b·R + a·I, which no cuBLASLt epilogue has).
// Run-time shapes: the baselines are not specialized. Compiled once per process.
#pragma once

#include <cstdint>

#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"
#include "dsl/ast.h"

namespace orthojit::cuda {

struct BaselineKernels {
  CUmodule module = nullptr;
  CUfunction largest = nullptr, sum_squares = nullptr, scale_cast = nullptr, output = nullptr, add_identity = nullptr;
};

// Their CUDA source (for the compile checks).
const char* baseline_kernel_source();
// Compiles and loads the kernels (once; `headers` is the device vocabulary they include).
const BaselineKernels& baseline_kernels(const NamedSources& headers);

// x (16-bit, row-major m x n with m <= n) = cast(g / (safety·‖g‖ + eps)) per matrix of the batch,
// transposing when rows > cols, the norm taken with a power-of-two scale as the generated kernels
// take it; `sums` holds 2·batch floats of scratch (baseline_norm_scratch_bytes).
inline int64_t baseline_norm_scratch_bytes(int64_t batch) { return 8 * batch; }
void enqueue_baseline_normalize(const BaselineKernels& kernels, CUdeviceptr g, int64_t batch, int64_t rows, int64_t cols, bool f16,
                                const dsl::Normalization& normalization, CUdeviceptr sums, CUdeviceptr x, CUstream stream);
// out (f32, the user's rows x cols) = x (16-bit, oriented), per matrix.
void enqueue_baseline_output(const BaselineKernels& kernels, CUdeviceptr x, int64_t batch, int64_t rows, int64_t cols, bool f16, CUdeviceptr out,
                             CUstream stream);
// d[z] += gamma·I for batch m x m 16-bit matrices (f32 add, one rounding).
void enqueue_baseline_add_identity(const BaselineKernels& kernels, CUdeviceptr d, int64_t batch, int64_t m, double gamma, bool f16, CUstream stream);

}  // namespace orthojit::cuda
