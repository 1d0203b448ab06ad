// The sm_90a product tile on a device (part of tests/cuda_device_test): D = α·A·B + β·C + γ·I
// for both operand layouts and output types, 128x128 and 128x256, on ragged and multi-round
// shapes, against an f64
// product of the same bf16 values, every element within its own bound, D's red zone poisoned.
#pragma once

#include <string>
#include <vector>

#include "cuda/nvrtc_compiler.h"
#include "cuda_device_case_log.h"

namespace orthojit::device_test {

struct HopperOutcome {
  std::string name;
  bool ok = false;
  double worst = 0;  // the largest error / bound over the elements
  std::string message;
};

// device_sm: the device's (90 runs the cases; anything else, or ORTHOJIT_CUDA_SM90A=off, skips
// them, saying why in `skipped_reason`). host_only: compile the kernels for sm_90a only. Each case
// (each compile) goes through `log`: its RUN line, the watchdog, the JSON, and the end of the run
// when its failure poisoned the context. Prints a line per case.
// `seed`: the operands' random seed (printed; cuda_device_test passes its seed base, so --seed
// replays these cases too).
std::vector<HopperOutcome> check_hopper_products(int device_sm, bool host_only, const cuda::NamedSources& headers, std::string& skipped_reason, CaseLog& log,
                                                 uint64_t seed = 1);

}  // namespace orthojit::device_test
