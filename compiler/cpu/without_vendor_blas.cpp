// The OpenBLAS engine in a build without OpenBLAS (ORTHOJIT_WITH_VENDOR_BLAS off or OpenBLAS not
// found): the declarations of vendor_gemm.h, so the executable and the tuner compile unchanged;
// a product on this engine throws PartNotBuilt. The tuner prunes the openblas candidates before
// that happens (autotune/search_space.cpp), so only a hand-made option reaches the throw.
#include "cpu/build_status.h"
#include "cpu/vendor_gemm.h"

namespace orthojit::cpu {

const char* to_string(ProductEngine engine) { return engine == ProductEngine::OpenBlas ? "openblas" : "jit"; }

void run_openblas_product(const GemmProblem&, int) { throw PartNotBuilt(vendor_blas_unavailable_reason()); }

const char* openblas_kernel_name() { return "(not built)"; }

std::string openblas_kernel_warning() { return ""; }

}  // namespace orthojit::cpu
