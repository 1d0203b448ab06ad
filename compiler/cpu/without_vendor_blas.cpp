// The OpenBLAS engine in a build without OpenBLAS (ORTHOJIT_WITH_VENDOR_BLAS off or OpenBLAS not
// found): the declarations of vendor_gemm.h and openblas_library.h, so the executable and the tuner
// compile unchanged; a product on this engine throws PartNotBuilt. The tuner prunes the openblas
// candidates before that happens (autotune/search_space.cpp), so only a hand-made option reaches
// the throw.
#include "cpu/build_status.h"
#include "cpu/openblas_library.h"
#include "cpu/vendor_gemm.h"

namespace orthojit::cpu {

void run_openblas_product(const GemmProblem&, ThreadPool*) { throw PartNotBuilt(vendor_blas_unavailable_reason()); }

const char* openblas_kernel_name() { return "(not built)"; }

std::string openblas_kernel_warning() { return ""; }

const std::string& openblas_unavailable_reason() { return vendor_blas_unavailable_reason(); }

const std::string& openblas_coretype_origin() {
  static const std::string none;
  return none;
}

bool openblas_user_coretype_replaced() { return false; }

std::string openblas_coretype_for_host() { return ""; }

const char* openblas_core_name() { return "(not built)"; }

void openblas_sgemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) {
  throw PartNotBuilt(vendor_blas_unavailable_reason());
}
void openblas_ssyrk(bool, int, int, float, const float*, int, float, float*, int) { throw PartNotBuilt(vendor_blas_unavailable_reason()); }
void openblas_dgemm_nt(int, int, int, const double*, const double*, double*) { throw PartNotBuilt(vendor_blas_unavailable_reason()); }
void openblas_set_threads(int) { throw PartNotBuilt(vendor_blas_unavailable_reason()); }
int openblas_threads() { throw PartNotBuilt(vendor_blas_unavailable_reason()); }

}  // namespace orthojit::cpu
