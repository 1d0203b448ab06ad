// The build's optional CPU parts (see build_status.h). The reasons' clauses come from the configure
// step (compiler/CMakeLists.txt passes them per file), so a part left out on purpose
// (-DORTHOJIT_WITH_LLVM=OFF) is not reported as missing.
#include "cpu/build_status.h"

namespace orthojit::cpu {

const std::string& cpu_backend_unavailable_reason() {
#ifdef ORTHOJIT_HAVE_CPU_BACKEND
  static const std::string reason;
#else
  static const std::string reason = std::string("this build has no CPU backend (") + ORTHOJIT_CPU_BACKEND_ABSENT_REASON + "); use backend ref or cuda";
#endif
  return reason;
}

const std::string& vendor_blas_unavailable_reason() {
#ifdef ORTHOJIT_HAVE_VENDOR_BLAS
  static const std::string reason;
#else
  static const std::string reason = std::string("this build has no OpenBLAS (") + ORTHOJIT_VENDOR_BLAS_ABSENT_REASON +
                                    "): the tuner's openblas candidates and the OpenBLAS baselines are left out";
#endif
  return reason;
}

}  // namespace orthojit::cpu
