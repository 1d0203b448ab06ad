// NVRTC: generated CUDA C++ to a cubin for the device's exact sm_XX (or to PTX for compute_XX).
// Canonical options (the program cache keys on them); ptxas's resource report is requested and
// parsed, so tests can assert registers, spills and shared memory without a GPU.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace orthojit::cuda {

using NamedSources = std::vector<std::pair<std::string, std::string>>;  // (include name, text)

// A compilation failure: the NVRTC log and the source with line numbers. When
// ORTHOJIT_DUMP_SOURCE_ON_ERROR is set, the source is also written to that path.
class CudaCompileError : public std::runtime_error {
 public:
  CudaCompileError(const std::string& message, std::string log, std::string numbered_source)
      : std::runtime_error(message), log_(std::move(log)), numbered_source_(std::move(numbered_source)) {}
  const std::string& log() const { return log_; }
  const std::string& numbered_source() const { return numbered_source_; }

 private:
  std::string log_, numbered_source_;
};

struct KernelResources {
  int registers = 0;
  int spill_store_bytes = 0, spill_load_bytes = 0, stack_bytes = 0;
  int shared_bytes = 0;
  // ptxas's messages that it serialized this kernel's wgmma pipeline (C7514: an instruction other
  // than wgmma touches the accumulators between mma_async and wait; C7515-C7520: the reasons it
  // inserted waits, e.g. C7519 "warpgroup.arrive is injected"). Correct code, but the products
  // then no longer overlap: a Hopper kernel must have none.
  std::vector<std::string> wgmma_serialization;
};

struct NvrtcOutput {
  std::string arch;              // "sm_90" (cubin) or "compute_90" (PTX)
  std::vector<char> image;       // cubin or PTX text
  std::string log;               // NVRTC + ptxas messages
  std::map<std::string, KernelResources> resources;  // by kernel, from ptxas -v (cubin only)
  std::vector<std::string> options;
};

// The options orthojit always passes (C++17, no fast math: the policies round as documented).
std::vector<std::string> canonical_options(const std::string& arch);

// `arch`: "sm_80", "sm_90", ... (cubin) or "compute_80", ... (PTX). Throws CudaCompileError.
NvrtcOutput compile_cuda(const std::string& source, const NamedSources& headers, const std::string& arch, const std::string& name = "orthojit.cu");

// "13.0"
std::string nvrtc_version();
// The newest sm_XX this NVRTC can compile to a cubin (for a device newer than that, use PTX).
int newest_supported_sm();

// Parses ptxas -v lines ("Compiling entry function 'f' for 'sm_90'", "Used 40 registers, 4096
// bytes smem", "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") and its wgmma
// serialization messages ("(C7514) ... in the function 'f'").
std::map<std::string, KernelResources> parse_ptxas_report(const std::string& log);

// The ptxas messages of every kernel whose wgmma pipeline was serialized, a line each: empty when
// none was (KernelResources::wgmma_serialization).
std::string wgmma_serialization_messages(const NvrtcOutput& output);

std::string numbered(const std::string& source);

}  // namespace orthojit::cuda
