// ORTHOJIT_CUDA_SM90A (see sm90a_switch.h).
#include "cuda/sm90a_switch.h"

#include <cstdlib>

namespace orthojit::cuda {

std::string sm90a_disabled_reason() {
  const char* value = std::getenv("ORTHOJIT_CUDA_SM90A");
  if (!value || !*value || std::string(value) == "on") return "";
  if (std::string(value) == "off") return "ORTHOJIT_CUDA_SM90A=off";
  return std::string("ORTHOJIT_CUDA_SM90A=") + value + " (only 'on' or unset lets the sm_90a kernels run)";
}

}  // namespace orthojit::cuda
