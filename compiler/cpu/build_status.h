// Which optional parts of the CPU layer this build has (cmake/optional_parts.cmake): the CPU
// backend needs LLVM 19 (ORTHOJIT_WITH_LLVM), the OpenBLAS engine needs OpenBLAS
// (ORTHOJIT_WITH_VENDOR_BLAS). A build without them (the GPU machines') still compiles every
// caller; what would need the missing part throws PartNotBuilt with the reason below, and the
// layers above check the reasons first to refuse `--backend cpu` as a usage error.
#pragma once

#include <stdexcept>
#include <string>

namespace orthojit::cpu {

// The message names the part, why it is missing and what to use instead.
class PartNotBuilt : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Empty when the CPU backend (the LLVM 19 JIT) is built; else "this build has no CPU backend
// (LLVM 19 was not found at configure time); use backend ref or cuda".
const std::string& cpu_backend_unavailable_reason();

// Empty when OpenBLAS is built in; else "this build has no OpenBLAS (OpenBLAS was not found at
// configure time): the tuner's openblas candidates and the OpenBLAS baselines are left out".
const std::string& vendor_blas_unavailable_reason();

}  // namespace orthojit::cpu
