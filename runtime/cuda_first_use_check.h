// The generated CUDA kernels checked on this device before a program first runs them. They are
// checked without a GPU only in the host emulation (tests/cuda_host_emulation.h), and the untuned
// default (`generated`) has no tuner judging it on the device: a fragment layout, a swizzle or a
// barrier phase that real hardware reads differently from the emulation would give every user
// wrong orthogonal factors, silently. So before a generated or fused-small variant first runs a
// program (not one a tuning record chose: the tuner checked that one on this device), the same
// program, strategy and precision run once at a small probe shape with the same kernel per
// product (each product's tile as the real shape gives it, the sm_90a tile where it runs), and
// the output is judged against the float64 reference as the tuner judges a candidate (per 16x16
// tile). A failure refuses the program with the reason instead of running it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "dsl/ast.h"
#include "passes/pipeline.h"

namespace orthojit::runtime {

// Runs `variant` of the probe function on the device: host f32 in, host f32 out.
using CudaProbeRun = std::function<std::vector<float>(const ir::Function& probe, const cuda::CudaVariant& variant, const std::vector<float>& input)>;

struct CudaFirstUseCheck {
  bool ran = false;     // false: not applicable (a vendor or tuned variant) or switched off
  bool passed = true;   // ran and within the reference's bounds (or did not run)
  std::string detail;   // the probe (shape, kernels) and its error, or why it did not run
};

// The probe's compile options: `real`'s program, strategy, precision and restarts at a small
// shape of the same orientation (200 x 264, or the real shape when it is that small; fused-small
// keeps the real rows), at most two matrices of a batch, without a Muon step.
passes::CompileOptions probe_options(const passes::CompileOptions& real, const cuda::CudaVariant& variant);

// `variant` with each product's tile fixed to the one the real program's launches give it (the
// same kernel template at the probe's shape). Throws std::invalid_argument when the probe's
// products do not line up with the real ones.
cuda::CudaVariant probe_variant(const cuda::CudaProgram& real, const ir::Function& probe, const cuda::CudaVariant& variant);

// The check, once per process per probe program and variant (later calls return the first
// result); `real_program` is the real shape's generated program. ORTHOJIT_CUDA_FIRST_USE_CHECK=off
// switches it off.
CudaFirstUseCheck check_cuda_variant_on_first_use(const dsl::Program& program, const passes::CompileOptions& real,
                                                  const cuda::CudaProgram& real_program, const cuda::CudaVariant& variant, const CudaProbeRun& run);

}  // namespace orthojit::runtime
