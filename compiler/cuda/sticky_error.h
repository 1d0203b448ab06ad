// Driver errors that poison the CUDA context. After a kernel's illegal memory access, illegal
// instruction, trap (a device assert), misaligned access or watchdog timeout the context is
// unusable: every later driver call in the process returns the same error, so whatever runs next
// fails for a reason that is not its own, until the process exits. A caller that runs many
// independent cases in one process (tests/cuda_device_test, bench/gpu_bench) stops at the first
// one, naming the case that caused it, instead of reporting every later case as failed.
#pragma once

#include <cuda.h>

#include <exception>
#include <optional>
#include <string>

namespace orthojit::cuda {

// Whether `result` is one of those errors: CUDA_ERROR_ILLEGAL_ADDRESS (700), LAUNCH_TIMEOUT (702),
// ASSERT (710), HARDWARE_STACK_ERROR (714), ILLEGAL_INSTRUCTION (715), MISALIGNED_ADDRESS (716),
// INVALID_ADDRESS_SPACE (717), INVALID_PC (718), LAUNCH_FAILED (719). Not the errors a call
// reports and the context survives (out of memory, launch out of resources, invalid PTX, ...).
bool is_sticky_error(CUresult result);

// The sticky error `error` carries (a CudaError with such a code), or nullopt.
std::optional<CUresult> sticky_error_of(const std::exception& error);

// Empty while the device's context is usable; else its sticky error as check() words it
// ("cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)").
// For a failure whose exception does not carry the code (a cuBLAS status, a kernel's fault that a
// later call reported). Waits for the work in flight (cuCtxSynchronize); needs a device.
std::string poisoned_context_reason();

// After `failure` on the device: empty when the context survived it; else the sticky error, in
// `failure`'s own words when it carries one, else poisoned_context_reason()'s.
std::string sticky_error_after(const std::exception& failure);

}  // namespace orthojit::cuda
