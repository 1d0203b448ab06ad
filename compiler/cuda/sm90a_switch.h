// The switch that keeps the sm_90a kernels (the wgmma/TMA/mbarrier product tile, cuda_codegen.h's
// "gemm on sm_90a") out of a process: ORTHOJIT_CUDA_SM90A=off. They are the newest code path and
// the likeliest to hang or fault on a device; scripts/gpu-check sets the switch for the phases
// after a correctness run that hung or faulted, so that one broken kernel does not cost the
// benchmark, the tuner and the Muon checks as well. Everything that could choose or run the tile
// asks here, and each refusal names the switch: variant_unavailable_reason (so build_cuda_runner
// and the tuner's pruning), the tuner's per-product search (no sm_90a tiles offered), a tuning
// record's winner on the tile (not used), hopper_product_unsupported_reason (the tile alone), the
// GPU test's and the GPU benchmark's sm_90a cases (skipped), and `orthojit info`.
#pragma once

#include <string>

namespace orthojit::cuda {

// Empty while the sm_90a kernels may run (ORTHOJIT_CUDA_SM90A unset, empty or "on"); else why
// not: "ORTHOJIT_CUDA_SM90A=off". Any other value turns them off too, its reason quoting it: a
// misspelt "off" must not leave in the kernel it was set to keep out. Read on every call, so a
// process (or a test) that sets the variable after start-up is obeyed.
std::string sm90a_disabled_reason();

}  // namespace orthojit::cuda
