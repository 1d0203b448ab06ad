// ORTHOJIT_CUDA_SM_COUNT (see sm_count_override.h).
#include "cuda/sm_count_override.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

namespace orthojit::cuda {

int multiprocessors_to_use(int device_multiprocessors) {
  const char* text = std::getenv("ORTHOJIT_CUDA_SM_COUNT");
  if (!text || !*text) return device_multiprocessors;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (!std::isdigit(static_cast<unsigned char>(text[0])) || *end != '\0' || errno != 0 || value < 1 || value > device_multiprocessors)
    throw std::runtime_error(std::string("ORTHOJIT_CUDA_SM_COUNT='") + text + "' is not a number of multiprocessors this device has (a whole number from 1 to " +
                             std::to_string(device_multiprocessors) + ", or unset for all of them)");
  return static_cast<int>(value);
}

}  // namespace orthojit::cuda
