// Runs a generated CUDA program (generate_cuda's per-op kernels and launch sequence) on the CPU,
// for tests without a GPU. Test infrastructure, not product code.
//
// The program's source is compiled with the host `c++` into a shared library, against
// tests/cuda_host_emulation.h in place of the device primitives (one std::thread per CUDA thread,
// a std::barrier for __syncthreads, the MMA as a warp collective, conversions rounding as the PTX
// ones do; tests/hopper_host_emulation.h for the sm_90a tile's primitives) and the composed device
// headers as they are (tests/emulated_device_headers.h), plus one trampoline per kernel:
//
//   extern "C" int oj_emu_launch_<kernel>(void* const* args, int count, const unsigned grid[3], unsigned block)
//
// which runs the kernel's whole grid with args[k] converted to the kernel's k-th parameter type.
// Every generated kernel parameter is a pointer, or a tensor map passed by value (args[k] then
// points at it), so one untyped array carries any kernel's arguments; the types come from the kernel's declaration by template deduction (oj_emu::launch),
// so nothing parses the source or repeats a signature, and a kernel whose arity differs from its
// Launch's argument list is reported instead of called with garbage. (Casting the kernel to
// `void(*)(void*, ...)` of the right arity would work on x86-64 too, but calls through a
// mismatched function type are undefined behavior and would hide an arity mismatch.)
//
// Memory is laid out as CudaExecutable lays it out on the device: one workspace with every planned
// buffer at 256-byte aligned offsets, then the normalization partial sums; input and output
// separate. Everything but the input starts poisoned (0xFF bytes: NaN in bf16, f16, f32 and f64),
// and poisoned red zones follow the input, the output and the workspace, and fill the alignment gaps
// between buffers; a run reports any of them written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_codegen.h"

namespace orthojit::cuda::emulation {

// Whether a host C++ compiler (`c++`) is at hand.
bool host_compiler_available();

// The SMs a persistent kernel (Launch::persistent) is given in the emulation: few, so that CTAs
// run several work items each.
constexpr int kEmulatedMultiprocessors = 3;

class HostEmulator {
 public:
  // Writes the source, the emulation header and the trampolines into `directory` (created),
  // compiles and loads them. Throws std::runtime_error with the compiler's log on failure (the
  // directory is kept then; otherwise the destructor removes it).
  HostEmulator(CudaProgram program, std::filesystem::path directory);
  ~HostEmulator();
  HostEmulator(const HostEmulator&) = delete;
  HostEmulator& operator=(const HostEmulator&) = delete;

  struct Result {
    std::vector<float> output;  // batch x output_elements
    std::string memory_errors;  // red zones or alignment gaps that were written; empty when none
  };
  // `launch` index -> called before and after that launch runs (null: nothing).
  using Hook = std::function<void(size_t launch)>;
  // Runs the launch sequence in order on `input` (batch x input_elements f32). A kernel with the
  // wrong arity throws std::runtime_error.
  Result run(const std::vector<float>& input, const Hook& before = {}, const Hook& after = {});

  // During a run (in the hooks) and after it: where a slot lives, as CudaExecutable binds it
  // (a Buffer slot with buffer -1 is nullptr).
  void* address(const Slot& slot) const;
  // A Muon step's argument block (ir::pack_muon_step_arguments with host pointers), what the
  // StepArgs slot points at in the runs that follow.
  void set_step_arguments(std::vector<uint64_t> words) { step_words_ = std::move(words); }
  const CudaProgram& program() const { return program_; }

 private:
  struct Memory;
  CudaProgram program_;
  std::filesystem::path directory_;
  void* library_ = nullptr;
  std::vector<void*> trampolines_;  // per launch
  std::unique_ptr<Memory> memory_;
  std::vector<uint64_t> step_words_;
  // The library's tensor map functions (programs with sm_90a products): the emulated map's size,
  // and filling one at `storage` (base, inner, rows, matrices, row bytes, matrix bytes, box).
  unsigned (*tensor_map_size_)() = nullptr;
  void (*tensor_map_fill_)(void*, const void*, unsigned long long, unsigned long long, unsigned long long, unsigned long long, unsigned long long, unsigned,
                           unsigned, unsigned) = nullptr;
  struct alignas(64) TensorMapStorage {
    unsigned char bytes[128];
  };
};

}  // namespace orthojit::cuda::emulation
