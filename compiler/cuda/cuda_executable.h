// A generated CUDA program loaded on the device: its module, its workspace (the planned buffers
// and the normalization partial sums) and the launch sequence. run_device enqueues the whole
// sequence on a stream without synchronizing (what the tuner and the benchmarks time with
// events); run copies host f32 in and out.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/cuda_codegen.h"
#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"
#include "ir/muon_step.h"

namespace orthojit::cuda {

class CudaExecutable {
 public:
  // Loads `compiled.image` (a cubin, or PTX the driver JIT-compiles) and allocates the workspace.
  CudaExecutable(CudaProgram program, const NvrtcOutput& compiled);
  ~CudaExecutable();
  CudaExecutable(const CudaExecutable&) = delete;
  CudaExecutable& operator=(const CudaExecutable&) = delete;

  // `input`: batch x input_elements f32; `output`: batch x output_elements f32, device memory.
  void run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const;
  // Host f32 in and out; synchronizes.
  void run(const float* input, float* output) const;
  // A Muon step (program().muon_step): uploads the argument block (device pointers and scalars
  // of every matrix, ir/muon_step.h) on `stream` and enqueues the launches; not synchronized.
  void run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices, CUstream stream) const;
  // The upload alone (run_muon_step = upload_step_arguments, then enqueue_launches).
  void upload_step_arguments(const std::vector<ir::MuonStepMatrix>& matrices, CUstream stream) const;
  // The launch sequence alone, bound to the argument block as last uploaded: what a CUDA graph
  // captures (the upload stays outside the graph, so each replay sees the step's new pointers
  // and scalars).
  void enqueue_launches(CUstream stream) const { launch_all(0, 0, stream); }

  const CudaProgram& program() const { return program_; }
  int64_t workspace_bytes() const { return workspace_.bytes(); }
  int64_t input_bytes() const { return program_.batch * program_.input_elements * 4; }
  int64_t output_bytes() const { return program_.batch * program_.output_elements * 4; }

 private:
  void launch_all(CUdeviceptr input, CUdeviceptr output, CUstream stream) const;

  CudaProgram program_;
  CUmodule module_ = nullptr;
  std::vector<CUfunction> functions_;     // per launch
  std::vector<int> resident_per_sm_;      // per launch: a persistent one's CTAs per SM (the driver's occupancy), else 1
  DeviceBuffer workspace_;                // every buffer and the partials, 256-byte aligned
  std::vector<int64_t> buffer_offsets_;   // per planned buffer, into the workspace
  int64_t partials_offset_ = 0;
  int64_t step_args_offset_ = 0;
  // Per launch, its tensor maps encoded over the workspace (Launch::tensor_maps; 64-byte aligned
  // as the driver requires, passed by value as the kernel's first parameters).
  struct alignas(64) EncodedMap {
    CUtensorMap map;
  };
  std::vector<std::vector<EncodedMap>> tensor_maps_;
  mutable DeviceBuffer host_input_, host_output_;  // staging for run()
};

}  // namespace orthojit::cuda
