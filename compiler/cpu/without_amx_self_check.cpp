// The AMX self-check (amx_self_check.h) in a build that runs no kernels at all: the fuzz build
// (tests/fuzz/CMakeLists.txt), whose readers reach cpu_isa.cpp through the device fingerprint but
// link neither the GEMM driver nor a JIT. AMX is never the path there.
#include "cpu/amx_self_check.h"

#include <stdexcept>

namespace orthojit::cpu {

AmxSelfCheck run_amx_self_check(const MicrokernelProvider&, bool) { throw std::logic_error("run_amx_self_check: this build runs no kernels"); }

const AmxSelfCheck& amx_self_check() {
  static const AmxSelfCheck check = [] {
    AmxSelfCheck result;
    result.detail = "not run: this build runs no kernels";
    return result;
  }();
  return check;
}

bool amx_fp16_usable() { return false; }

}  // namespace orthojit::cpu
