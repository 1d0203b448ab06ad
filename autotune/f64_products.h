// The f64 dot products of the reference checks (reference::ProductHook): sums[i·n + j] =
// Σ_p a[i·k + p] · b_t[j·k + p]. OpenBLAS dgemm when the build has it; otherwise (the GPU machines'
// build, ORTHOJIT_WITH_VENDOR_BLAS off) portable_f64_products, a blocked multi-threaded loop that
// keeps a check of a large shape in seconds (the interpreter's own exact-order loop would take
// minutes). Either way an implementation independent of the kernels being checked; only the order
// of the f64 sums differs, far below any storage type's rounding.
#pragma once

#include <cstdint>

namespace orthojit::autotune {

void f64_products(int64_t m, int64_t n, int64_t k, const double* a, const double* b_t, double* sums);

// The fallback itself, in every build (tests compare it with the BLAS).
void portable_f64_products(int64_t m, int64_t n, int64_t k, const double* a, const double* b_t, double* sums);

}  // namespace orthojit::autotune
