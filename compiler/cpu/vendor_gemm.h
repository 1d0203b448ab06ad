// Products through a vendor BLAS instead of the JIT kernels: the CPU's "vendor library" candidate
// of the autotuner (docs/autotuning.md, engine `openblas`) and the baseline it is compared with.
// The executable runs the same scheduled IR either way; only the GEMM engine differs, so the
// candidate is the program the user wrote, with the same strategy, storage rounding and epilogue
// semantics.
#pragma once

#include <string>

#include "cpu/gemm_driver.h"

namespace orthojit::cpu {

enum class ProductEngine {
  Jit,       // the blocked GEMM around the generated microkernels (gemm_driver.h)
  OpenBlas,  // OpenBLAS sgemm / ssyrk on f32 copies of the operands, then the epilogue
};
const char* to_string(ProductEngine engine);

// D = α·A·B + β·C + γ·I on OpenBLAS with `threads` threads (its own pool). 16-bit operands are
// widened to f32 first (OpenBLAS 0.3.21 has no bf16 GEMM in Debian's build); the result is
// rounded to D's type once, as the JIT epilogue does. A symmetric product whose B is Aᵀ runs as
// ssyrk (one triangle) and is mirrored, the textbook baseline.
void run_openblas_product(const GemmProblem& problem, int threads);

// The name OpenBLAS gives its kernel for this CPU ("SkylakeX", "Haswell", "Prescott", ...).
const char* openblas_kernel_name();

// A warning when OpenBLAS runs a kernel below what this CPU can do (Debian's 0.3.21 does not know
// recent Xeons and falls back to Prescott, SSE3), which makes every comparison with it flatter
// orthojit; empty when its kernel matches the CPU's vector width.
std::string openblas_kernel_warning();

}  // namespace orthojit::cpu
