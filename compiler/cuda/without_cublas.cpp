// The cuBLAS baseline in a build whose CUDA toolkit lacks cuBLAS's headers (cublas_v2.h; a
// toolkit of nvcc and NVRTC alone, with cuBLAS only as a pip wheel scripts/gpu-check did not find):
// the declarations of cublas_newton_schulz.h, so the backend, the tuner and the GPU checks build
// unchanged. unavailable_reason() says why, which makes the cublas variant "not applicable" in
// cuda_device_test and pruned in the tuner (cuda_backend.cpp's variant_unavailable_reason), and the
// GPU benchmark reports the missing column instead of a number.
#include <stdexcept>

#include "cuda/cublas_newton_schulz.h"

namespace orthojit::cuda {

struct CublasNewtonSchulz::State {};

std::string CublasNewtonSchulz::unavailable_reason() {
  return "this build has no cuBLAS baseline: cublas_v2.h was not found at configure time (install the toolkit's cuBLAS, or pass "
         "-DORTHOJIT_CUBLAS_INCLUDE_DIR=<dir with cublas_v2.h>, e.g. site-packages/nvidia/cu13/include)";
}

CublasNewtonSchulz::CublasNewtonSchulz(int64_t, int64_t, int64_t, ScalarType, std::vector<dsl::Triple>, dsl::Normalization, const NamedSources&) {
  throw std::runtime_error(unavailable_reason());
}

CublasNewtonSchulz::~CublasNewtonSchulz() = default;

void CublasNewtonSchulz::run_device(CUdeviceptr, CUdeviceptr, CUstream) const { throw std::runtime_error(unavailable_reason()); }

void CublasNewtonSchulz::run(const float*, float*) const { throw std::runtime_error(unavailable_reason()); }

double CublasNewtonSchulz::measure_gemm_tflops(int64_t, int) { throw std::runtime_error(unavailable_reason()); }

}  // namespace orthojit::cuda
