// The CUDA device vocabulary (kernels/cuda/*.cuh), embedded in the binary: generated kernels
// include these by name and NVRTC receives their text, so no CUDA headers are needed at run time.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace orthojit::kernels {

// (include name, text) pairs, e.g. ("orthojit_device.cuh", "...").
const std::vector<std::pair<std::string, std::string>>& cuda_device_headers();

}  // namespace orthojit::kernels
