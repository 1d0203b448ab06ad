// CUDA graph capture and replay (see cuda_graph.h).
#include "cuda/cuda_graph.h"

namespace orthojit::cuda {

CudaGraph::CudaGraph(const std::function<void(CUstream)>& enqueue) {
  const Device& device = Device::get();
  device.make_current();
  const DriverApi& api = device.api();
  CUstream capture = nullptr;
  check(api.cuStreamCreate(&capture, CU_STREAM_NON_BLOCKING), "cuStreamCreate (graph capture)");
  CUgraph graph = nullptr;
  try {
    // Thread-local mode: another thread's unrelated CUDA calls do not invalidate this capture.
    check(api.cuStreamBeginCapture(capture, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
    try {
      enqueue(capture);
    } catch (...) {
      CUgraph partial = nullptr;
      api.cuStreamEndCapture(capture, &partial);
      if (partial) api.cuGraphDestroy(partial);
      throw;
    }
    check(api.cuStreamEndCapture(capture, &graph), "cuStreamEndCapture");
    check(api.cuGraphInstantiate(&exec_, graph, 0), "cuGraphInstantiate");
  } catch (...) {
    if (graph) api.cuGraphDestroy(graph);
    api.cuStreamDestroy(capture);
    throw;
  }
  api.cuGraphDestroy(graph);  // the executable graph keeps what it needs
  api.cuStreamDestroy(capture);
}

CudaGraph::~CudaGraph() {
  if (!exec_) return;
  Device::get().make_current_quietly();
  Device::get().api().cuGraphExecDestroy(exec_);
}

void CudaGraph::launch(CUstream stream) const {
  const Device& device = Device::get();
  device.make_current();
  check(device.api().cuGraphLaunch(exec_, stream), "cuGraphLaunch");
}

}  // namespace orthojit::cuda
