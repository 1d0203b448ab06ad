// NVRTC driver.
#include "cuda/nvrtc_compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

namespace orthojit::cuda {

std::vector<std::string> canonical_options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=true", "-default-device", "--ptxas-options=-v"};
}

std::string numbered(const std::string& source) {
  std::istringstream in(source);
  std::ostringstream out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%5d | ", number);
    out << prefix << line << "\n";
  }
  return out.str();
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

int newest_supported_sm() {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) return 0;
  std::vector<int> archs(static_cast<size_t>(count));
  nvrtcGetSupportedArchs(archs.data());
  return *std::max_element(archs.begin(), archs.end());
}

std::map<std::string, KernelResources> parse_ptxas_report(const std::string& log) {
  std::map<std::string, KernelResources> result;
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex stack(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  // The C75xx performance messages name their kernel themselves and may come before its entry line.
  static const std::regex serialized(R"(\(C75(1[4-9]|20)\).*function '([^']+)')");
  std::istringstream in(log);
  std::string line, current;
  std::smatch match;
  while (std::getline(in, line)) {
    if (std::regex_search(line, match, serialized)) {
      result[match[2]].wgmma_serialization.push_back(line);
      continue;
    }
    if (std::regex_search(line, match, entry)) {
      current = match[1];
      result[current];
      continue;
    }
    if (current.empty()) continue;
    KernelResources& resources = result[current];
    if (std::regex_search(line, match, stack)) {
      resources.stack_bytes = std::stoi(match[1]);
      resources.spill_store_bytes = std::stoi(match[2]);
      resources.spill_load_bytes = std::stoi(match[3]);
    }
    if (std::regex_search(line, match, used)) resources.registers = std::stoi(match[1]);
    if (std::regex_search(line, match, smem)) resources.shared_bytes = std::stoi(match[1]);
  }
  return result;
}

std::string wgmma_serialization_messages(const NvrtcOutput& output) {
  std::string messages;
  for (const auto& [kernel, resources] : output.resources)
    for (const std::string& line : resources.wgmma_serialization) messages += kernel + ": " + line + "\n";
  return messages;
}

NvrtcOutput compile_cuda(const std::string& source, const NamedSources& headers, const std::string& arch, const std::string& name) {
  const bool cubin = arch.rfind("sm_", 0) == 0;
  if (!cubin && arch.rfind("compute_", 0) != 0) throw std::invalid_argument("unknown CUDA architecture '" + arch + "' (expected sm_XX or compute_XX)");
  std::vector<const char*> header_sources, header_names;
  for (const auto& [header_name, text] : headers) {
    header_names.push_back(header_name.c_str());
    header_sources.push_back(text.c_str());
  }
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source.c_str(), name.c_str(), static_cast<int>(headers.size()), header_sources.data(), header_names.data()) != NVRTC_SUCCESS)
    throw CudaCompileError("nvrtcCreateProgram failed", "", numbered(source));
  NvrtcOutput output;
  output.arch = arch;
  output.options = canonical_options(arch);
  if (!cubin) output.options.pop_back();  // no ptxas when stopping at PTX
  std::vector<const char*> options;
  for (const auto& option : output.options) options.push_back(option.c_str());
  const nvrtcResult compiled = nvrtcCompileProgram(program, static_cast<int>(options.size()), options.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  output.log.resize(log_size);
  if (log_size > 0) nvrtcGetProgramLog(program, output.log.data());
  while (!output.log.empty() && output.log.back() == '\0') output.log.pop_back();
  if (compiled != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&program);
    std::string message = std::string("NVRTC failed to compile generated CUDA for ") + arch + ": " + nvrtcGetErrorString(compiled) + "\n" + output.log;
    if (const char* dump = std::getenv("ORTHOJIT_DUMP_SOURCE_ON_ERROR"); dump && *dump) {
      std::ofstream(dump) << source;
      message += "\n(source written to " + std::string(dump) + ")";
    }
    throw CudaCompileError(message, output.log, numbered(source));
  }
  size_t size = 0;
  if (cubin) {
    nvrtcGetCUBINSize(program, &size);
    output.image.resize(size);
    nvrtcGetCUBIN(program, output.image.data());
    output.resources = parse_ptxas_report(output.log);
  } else {
    nvrtcGetPTXSize(program, &size);
    output.image.resize(size);
    nvrtcGetPTX(program, output.image.data());
  }
  nvrtcDestroyProgram(&program);
  return output;
}

}  // namespace orthojit::cuda
