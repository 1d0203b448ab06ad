// ORTHOJIT_CUDA_SM_COUNT=N: orthojit sizes its work as if the device had N multiprocessors (at
// most the real count). What the count decides: the wave of a persistent kernel (how many CTAs
// loop over the work items, Launch::ctas), the default tiles and the split-K candidates (enough
// CTAs to fill the SMs), the element-wise kernels' grid. The other kernels' grids follow their
// tiles, and the hardware still spreads any grid over every SM. What it is for: a device check in
// which each persistent CTA takes several work items one after the other (on 132 SMs the checked
// shapes give each CTA one, so the pipeline phases carried from one item into the next would run
// in no device check: `cuda_device_test --one-sm`, which scripts/gpu-check's correctness phase runs
// after its check), and tuning for the share of a GPU a job gets (a tuning record's device
// fingerprint counts these SMs, so records do not mix counts).
#pragma once

#include <string>

namespace orthojit::cuda {

// The multiprocessors to size work for on a device with `device_multiprocessors`: that count
// when ORTHOJIT_CUDA_SM_COUNT is unset or empty, else its value. Throws std::runtime_error naming
// the variable, its value and the valid range when the value is not a whole number in 1..device.
int multiprocessors_to_use(int device_multiprocessors);

}  // namespace orthojit::cuda
