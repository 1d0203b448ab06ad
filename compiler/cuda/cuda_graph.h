// A sequence of kernel launches captured once into a CUDA graph and replayed with one launch
// (what a step made of many small kernels needs: the CPU-side cost of ~5 µs per cuLaunchKernel
// goes, the GPU runs the kernels back to back). The graph holds the kernels and their argument
// values (device pointers); data that changes from replay to replay must live in device memory
// the kernels read (the Muon step's argument block), uploaded before each launch.
#pragma once

#include <functional>

#include "cuda/cuda_driver.h"

namespace orthojit::cuda {

class CudaGraph {
 public:
  // Captures what `enqueue(stream)` launches on a private stream (the legacy default stream
  // cannot be captured, and captured kernels do not depend on the stream they were captured on),
  // then instantiates it. Nothing runs during the capture. Throws CudaError, with the capture
  // ended, when a launch or the instantiation fails.
  explicit CudaGraph(const std::function<void(CUstream)>& enqueue);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Enqueues the whole graph on `stream` (any stream, the legacy default one included).
  void launch(CUstream stream) const;

 private:
  CUgraphExec exec_ = nullptr;
};

}  // namespace orthojit::cuda
