// cuobjdump for the SASS tests (tests/cuda_sass_test.cpp, tests/cuda_hopper_product_test.cpp):
// where the tool is, and a cubin's SASS per function. No GPU is needed.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/nvrtc_compiler.h"

namespace orthojit::cuda {

// A shell command's standard output.
inline std::string run_command(const std::string& command) {
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    std::array<char, 4096> buffer;
    size_t n;
    while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
    pclose(pipe);
  }
  return output;
}

// The folder holding cuobjdump and nvdisasm: $ORTHOJIT_CUDA_BINUTILS, the toolkit's bin, PATH, or
// the PyPI wheels' nvidia/cu13/bin of /usr/bin/python3.
inline std::string binutils(std::string& looked) {
  std::vector<std::string> candidates;
  if (const char* forced = std::getenv("ORTHOJIT_CUDA_BINUTILS")) candidates.push_back(forced);
  if (const char* home = std::getenv("CUDA_HOME")) candidates.push_back(std::string(home) + "/bin");
  candidates.push_back("/usr/local/cuda/bin");
  const std::string on_path = run_command("dirname \"$(command -v cuobjdump 2>/dev/null)\" 2>/dev/null");
  if (!on_path.empty() && on_path != ".\n") candidates.push_back(on_path.substr(0, on_path.size() - 1));
  const std::string wheel = run_command("/usr/bin/python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], \"cu13\", \"bin\"))' 2>/dev/null");
  if (!wheel.empty()) candidates.push_back(wheel.substr(0, wheel.size() - 1));
  for (const std::string& folder : candidates) {
    looked += " " + folder;
    if (std::filesystem::exists(folder + "/cuobjdump") && std::filesystem::exists(folder + "/nvdisasm")) return folder;
  }
  return "";
}

// Function name -> its SASS text.
inline std::map<std::string, std::string> sass_by_function(const std::string& folder, const NvrtcOutput& compiled) {
  const std::filesystem::path cubin = std::filesystem::path(::testing::TempDir()) / ("orthojit_sass_" + std::to_string(::getpid()) + ".cubin");
  std::ofstream(cubin, std::ios::binary).write(compiled.image.data(), static_cast<std::streamsize>(compiled.image.size()));
  const std::string text = run_command("PATH=\"" + folder + ":$PATH\" \"" + folder + "/cuobjdump\" -sass \"" + cubin.string() + "\" 2>&1");
  std::filesystem::remove(cubin);
  std::map<std::string, std::string> functions;
  std::istringstream lines(text);
  std::string line, current;
  while (std::getline(lines, line)) {
    if (const size_t at = line.find("Function : "); at != std::string::npos) {
      current = line.substr(at + 11);
      continue;
    }
    if (!current.empty()) functions[current] += line + "\n";
  }
  return functions;
}

}  // namespace orthojit::cuda
