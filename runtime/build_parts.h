// The parts this build has (cmake/optional_parts.cmake) and, for each part left out, why: what
// `orthojit info` prints (and its --json "parts"), so a machine's build can be read off without its
// CMake cache; scripts/gpu-check's preflight quotes it.
#pragma once

#include <string>
#include <vector>

namespace orthojit::runtime {

struct BuildPart {
  std::string name;    // "cpu backend", "openblas", "mpi engine", "cuda backend", "nccl engine", ...
  bool built = false;
  std::string detail;  // built: what it is ("LLVM 19.1.7"); not built: why ("LLVM 19 was not found at configure time")
};
std::vector<BuildPart> build_parts();

// Empty when the MPI engine of the distributed optimizer is built; else "this build has no MPI
// engine (MPI was not found at configure time); use the NCCL engine or one process".
const std::string& mpi_unavailable_reason();

}  // namespace orthojit::runtime
