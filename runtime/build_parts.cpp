// The parts of this build (see build_parts.h). The reasons' clauses come from the configure step
// (runtime/CMakeLists.txt passes them to this file); the details of built parts are asked of the
// parts themselves, so they name the library versions this binary really uses.
#include "runtime/build_parts.h"

#include "cpu/build_status.h"
#include "cpu/llvm_jit.h"
#include "cpu/openblas_library.h"
#include "cpu/vendor_gemm.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "cuda/cublas_newton_schulz.h"
#include "cuda/nvrtc_compiler.h"
#endif
#ifdef ORTHOJIT_HAVE_NCCL
#include "runtime/zero/nccl_communicator.h"
#endif

namespace orthojit::runtime {

const std::string& mpi_unavailable_reason() {
#ifdef ORTHOJIT_HAVE_MPI
  static const std::string reason;
#else
  static const std::string reason = std::string("this build has no MPI engine (") + ORTHOJIT_MPI_ABSENT_REASON + "); use the NCCL engine or one process";
#endif
  return reason;
}

std::vector<BuildPart> build_parts() {
  std::vector<BuildPart> parts;
  parts.push_back({"ref backend", true, "the f64 reference interpreter"});
  if (cpu::cpu_backend_unavailable_reason().empty()) parts.push_back({"cpu backend", true, cpu::llvm_version()});
  else parts.push_back({"cpu backend", false, ORTHOJIT_CPU_BACKEND_ABSENT_REASON});
  if (!cpu::vendor_blas_unavailable_reason().empty()) parts.push_back({"openblas", false, ORTHOJIT_VENDOR_BLAS_ABSENT_REASON});
  else if (!cpu::openblas_unavailable_reason().empty()) parts.push_back({"openblas", false, cpu::openblas_unavailable_reason()});
  else parts.push_back({"openblas", true, std::string("kernel ") + cpu::openblas_kernel_name() + " (" + cpu::openblas_coretype_origin() + ")"});
  if (const std::string reason = cpu::onednn_unavailable_reason(ScalarType::BF16); reason.empty()) parts.push_back({"onednn", true, cpu::onednn_description()});
  else parts.push_back({"onednn", false, reason});
#ifdef ORTHOJIT_HAVE_CUDA
  parts.push_back({"cuda backend", true, "NVRTC " + cuda::nvrtc_version() + " (libcuda and cuBLAS opened at run time)"});
  const std::string cublas = cuda::CublasNewtonSchulz::unavailable_reason();
#ifdef ORTHOJIT_HAVE_CUBLAS_BASELINE
  parts.push_back({"cublas baseline", true, cublas.empty() ? "libcublas loads" : "libcublas opened at run time; here: " + cublas});
#else
  parts.push_back({"cublas baseline", false, cublas});
#endif
#ifdef ORTHOJIT_HAVE_NCCL
  const std::string nccl = NcclCommunicator::unavailable_reason();
  parts.push_back({"nccl engine", true, nccl.empty() ? "libnccl loads" : "libnccl opened at run time; here: " + nccl});
#else
  parts.push_back({"nccl engine", false, "nccl.h was not found at configure time (-DORTHOJIT_NCCL_INCLUDE_DIR=...)"});
#endif
#else
  parts.push_back({"cuda backend", false, "the CUDA toolkit was not found at configure time"});
  parts.push_back({"nccl engine", false, "the CUDA toolkit was not found at configure time"});
#endif
#ifdef ORTHOJIT_HAVE_MPI
  parts.push_back({"mpi engine", true, "the distributed optimizer over MPI"});
#else
  parts.push_back({"mpi engine", false, ORTHOJIT_MPI_ABSENT_REASON});
#endif
  parts.push_back({"c api", true, "include/orthojit/orthojit.h, liborthojit_c.so"});
  if (std::string(ORTHOJIT_PYTHON_ABSENT_REASON).empty()) parts.push_back({"python extension", true, "orthojit._orthojit in <build>/python"});
  else parts.push_back({"python extension", false, ORTHOJIT_PYTHON_ABSENT_REASON});
  return parts;
}

}  // namespace orthojit::runtime
