// The AMX tile kernels checked on this machine before any product uses them. They are generated
// code whose tile instructions are tested on CPUs without AMX only through the emulator
// (amx_emulator.h): a tile configuration, stride or operand order that real hardware reads
// differently would give wrong products on the default path of every AMX machine, and the
// default path has no tuner to judge it. So on the first use of the amx path (host_supports)
// the native kernels run a few products that reach the packing forms and the remainders in M, N
// and K, against float64 products of the same values with a bound argued from f32 accumulation;
// a failure takes the amx path (or only its f16 products) away, and `orthojit info` says why.
#pragma once

#include <functional>
#include <string>

#include "cpu/gemm_driver.h"

namespace orthojit::cpu {

struct AmxSelfCheck {
  bool ran = false;           // false: AMX is not executable here (or this build has no JIT)
  bool bf16_passed = false;   // TDPBF16PS products
  bool fp16_checked = false;  // the CPU reports AMX-FP16
  bool fp16_passed = false;   // TDPFP16PS products
  std::string detail;         // what ran and the worst error against its bound, or the failure
};

// The kernel of each spec the driver asks for (native: get_microkernel; tests: emulated ones).
using MicrokernelProvider = std::function<MicrokernelFunction(const MicrokernelSpec&)>;

// Runs the check's products on `kernels` (bf16, and f16 with `with_fp16`). Pure apart from the
// kernels: the tests run it on emulated and on deliberately wrong kernels.
AmxSelfCheck run_amx_self_check(const MicrokernelProvider& kernels, bool with_fp16);

// The process's check of the native kernels, run once (thread-safe) where the CPU and the OS run
// AMX (host_executes(CpuIsa::AmxBf16)); ORTHOJIT_AMX_SELF_CHECK=off skips it (then trusted).
const AmxSelfCheck& amx_self_check();

// f16 x f16 products on the tiles: the amx path is usable, the CPU has AMX-FP16 and its kernels
// passed the check.
bool amx_fp16_usable();

}  // namespace orthojit::cpu
