// Driver errors that poison the context (see sticky_error.h).
#include "cuda/sticky_error.h"

#include "cuda/cuda_driver.h"

namespace orthojit::cuda {

bool is_sticky_error(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
      return true;
    default:
      return false;
  }
}

std::optional<CUresult> sticky_error_of(const std::exception& error) {
  const auto* cuda_error = dynamic_cast<const CudaError*>(&error);
  if (cuda_error && is_sticky_error(cuda_error->code())) return cuda_error->code();
  return std::nullopt;
}

std::string poisoned_context_reason() {
  const Device& device = Device::get();
  try {
    device.make_current();
    check(device.api().cuCtxSynchronize(), "cuCtxSynchronize");
  } catch (const CudaError& error) {
    if (is_sticky_error(error.code())) return error.what();
  }
  return "";
}

std::string sticky_error_after(const std::exception& failure) {
  if (sticky_error_of(failure)) return failure.what();
  return poisoned_context_reason();
}

}  // namespace orthojit::cuda
