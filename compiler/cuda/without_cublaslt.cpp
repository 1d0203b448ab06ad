// The cuBLASLt baseline in a build whose CUDA toolkit lacks cuBLAS's headers (cublasLt.h ships
// with cublas_v2.h): the declarations of cublaslt_newton_schulz.h, every entry point saying why,
// so the backend, the tuner (which prunes the variant with this reason) and the benchmark build
// unchanged.
#include <stdexcept>

#include "cuda/cublaslt_newton_schulz.h"

namespace orthojit::cuda {

struct CublasLtNewtonSchulz::State {};

std::string CublasLtNewtonSchulz::library_reason() {
  return "this build has no cuBLASLt baseline: cublasLt.h was not found at configure time (install the toolkit's cuBLAS, or pass "
         "-DORTHOJIT_CUBLAS_INCLUDE_DIR=<dir with cublas_v2.h and cublasLt.h>, e.g. site-packages/nvidia/cu13/include)";
}
std::string CublasLtNewtonSchulz::unavailable_reason() { return library_reason(); }
std::vector<std::string> CublasLtNewtonSchulz::library_candidates() { return {}; }
std::string CublasLtNewtonSchulz::probe_library(const std::vector<std::string>&) { return library_reason(); }
size_t CublasLtNewtonSchulz::library_version() { return 0; }

CublasLtNewtonSchulz::CublasLtNewtonSchulz(int64_t, int64_t, int64_t, ScalarType, LtSchedule, dsl::Normalization, const NamedSources&) {
  throw std::runtime_error(library_reason());
}
CublasLtNewtonSchulz::~CublasLtNewtonSchulz() = default;
const LtSchedule& CublasLtNewtonSchulz::schedule() const { throw std::runtime_error(library_reason()); }
std::string CublasLtNewtonSchulz::algorithms() const { return ""; }
void CublasLtNewtonSchulz::run_device(CUdeviceptr, CUdeviceptr, CUstream) const { throw std::runtime_error(library_reason()); }
void CublasLtNewtonSchulz::run(const float*, float*) const { throw std::runtime_error(library_reason()); }

}  // namespace orthojit::cuda
