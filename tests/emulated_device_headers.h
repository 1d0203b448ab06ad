// The device vocabulary as the host emulation compiles it: every embedded header
// (kernels::cuda_device_headers) as it is, except the primitives, which are replaced by their
// emulations. So what runs in the emulation is the real composed code (orthojit_device.cuh,
// orthojit_mma_product.cuh, orthojit_hopper_product.cuh), over host models of the instructions:
//   orthojit_device_primitives.cuh  -> tests/cuda_host_emulation.h
//   orthojit_hopper_primitives.cuh  -> tests/hopper_host_emulation.h
// Test infrastructure, not product code.
#pragma once

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "kernels/cuda_device_headers.h"

namespace orthojit::cuda::emulation {

// `dynamic_shared_only`: the source declares only `extern __shared__` memory (the fused kernel,
// the sm_90a tile), which binds to the emulation's shared window instead of function statics.
inline void write_emulated_device_headers(const std::filesystem::path& directory, bool dynamic_shared_only) {
  const std::filesystem::path tests = std::filesystem::path(ORTHOJIT_SOURCE_DIR) / "tests";
  const auto copy = std::filesystem::copy_options::overwrite_existing;
  std::filesystem::create_directories(directory);
  std::filesystem::copy_file(tests / "cuda_host_emulation.h", directory / "cuda_host_emulation.h", copy);
  bool primitives = false;
  for (const auto& [name, text] : kernels::cuda_device_headers()) {
    if (name == "orthojit_device_primitives.cuh") {
      primitives = true;
      std::ofstream(directory / name) << "#pragma once\n"
                                      << (dynamic_shared_only ? "#define OJ_EMULATION_DYNAMIC_SHARED_ONLY\n" : "") << "#include \"cuda_host_emulation.h\"\n";
    } else if (name == "orthojit_hopper_primitives.cuh") {
      std::filesystem::copy_file(tests / "hopper_host_emulation.h", directory / name, copy);
    } else {
      std::ofstream(directory / name) << text;
    }
  }
  if (!primitives) throw std::runtime_error("host emulation: the embedded device headers have no orthojit_device_primitives.cuh");
}

}  // namespace orthojit::cuda::emulation
