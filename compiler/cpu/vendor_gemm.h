// Products through a vendor library instead of the JIT kernels: the CPU's "vendor library"
// candidates of the autotuner (docs/autotuning.md, engines `openblas` and `onednn`) and the
// baselines they are compared with. The executable runs the same scheduled IR either way; only the
// GEMM engine differs, so a candidate is the program the user wrote, with the same strategy,
// storage rounding and epilogue semantics.
#pragma once

#include <string>

#include "cpu/gemm_driver.h"
#include "support/scalar_type.h"

namespace orthojit::cpu {

class ThreadPool;

enum class ProductEngine {
  Jit,       // the blocked GEMM around the generated microkernels (gemm_driver.h)
  OpenBlas,  // OpenBLAS sgemm / ssyrk on f32 operands (16-bit ones widened), then the epilogue
  OneDnn,    // oneDNN matmul: bf16 (or f16) operands in place where the library has that matmul on
             // this CPU, else widened to f32; f32 accumulation, then the epilogue
};
const char* to_string(ProductEngine engine);  // "jit", "openblas", "onednn"

// D = α·A·B + β·C + γ·I on OpenBLAS with the pool's thread count (OpenBLAS's own threads; the
// pool runs the conversions and the epilogue). 16-bit operands are widened to f32 first (OpenBLAS
// 0.3.21 has no bf16 GEMM in Debian's build). An f32 row-major D is written by the call itself
// (C copied in, β passed to it, γ added to the diagonal after); another D gets the f32 product and
// one epilogue pass that rounds once to D's type. A symmetric product whose B is Aᵀ runs as ssyrk
// (one triangle) and is mirrored, the textbook baseline.
void run_openblas_product(const GemmProblem& problem, ThreadPool* pool);

// The name OpenBLAS gives its kernel for this CPU ("SkylakeX", "Haswell", "Zen", "Prescott", ...).
const char* openblas_kernel_name();

// A warning when OpenBLAS runs a kernel below what this CPU can do, which makes every comparison
// with it flatter orthojit. orthojit chooses the kernel before opening the library
// (openblas_library.h), so this is empty unless the user forced a weaker OPENBLAS_CORETYPE, forced
// one this CPU cannot run (replaced by orthojit's choice; the warning says so), or the program had
// loaded OpenBLAS itself.
std::string openblas_kernel_warning();

// The same product on oneDNN's matmul primitive (cached per shape, strides, types and scales), on
// the pool's thread count.
void run_onednn_product(const GemmProblem& problem, ThreadPool* pool);

// Why the oneDNN engine is not offered for a storage type ("" when it is): a build without oneDNN,
// or (f16) no f16 matmul on this CPU; bf16 is offered whenever oneDNN is built (widened to f32 where
// the library has no bf16 matmul for the CPU, as OpenBLAS is).
std::string onednn_unavailable_reason(ScalarType storage);

// "oneDNN 2.6.3, bf16 matmul brg:avx512_core_amx" or "... bf16 widened to f32 (no bf16 matmul on
// this CPU), f32 matmul gemm:jit": the implementation oneDNN picks for each operand type.
std::string onednn_description();

}  // namespace orthojit::cpu
