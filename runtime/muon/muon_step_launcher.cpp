// A step's compiled Muon steps, with CUDA graph replay (see muon_step_launcher.h).
#include "runtime/muon/muon_step_launcher.h"

#include <cstdio>

#ifdef ORTHOJIT_HAVE_CUDA
#include "cuda/cuda_graph.h"
#endif

namespace orthojit::runtime {

struct MuonStepLauncher::Graph {
#ifdef ORTHOJIT_HAVE_CUDA
  std::unique_ptr<cuda::CudaGraph> graph;  // null: the capture failed; this sequence runs without one
  // The compiled steps stay alive while their launches are captured in the graph.
  std::vector<std::shared_ptr<CompiledOrthogonalizer>> keep_alive;
#endif
};

MuonStepLauncher::MuonStepLauncher() = default;
MuonStepLauncher::~MuonStepLauncher() = default;

void MuonStepLauncher::run(const std::vector<MuonStepGroup>& groups, void* stream, bool graphs) {
  bool all_device = !groups.empty();
  for (const MuonStepGroup& group : groups) all_device &= group.compiled->runs_on_device();
  if (!graphs || !all_device) {
    for (const MuonStepGroup& group : groups) group.compiled->run_muon_step(group.matrices, stream);
    return;
  }
#ifdef ORTHOJIT_HAVE_CUDA
  std::vector<const CompiledOrthogonalizer*> key;
  for (const MuonStepGroup& group : groups) key.push_back(group.compiled.get());
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    auto entry = std::make_unique<Graph>();
    for (const MuonStepGroup& group : groups) entry->keep_alive.push_back(group.compiled);
    try {
      entry->graph = std::make_unique<cuda::CudaGraph>([&](CUstream capture) {
        for (const MuonStepGroup& group : groups) group.compiled->enqueue_launches(capture);
      });
      ++captured_;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "orthojit: capturing a Muon step of %zu launch groups into a CUDA graph failed (%s); it runs without a graph\n",
                   groups.size(), error.what());
    }
    found = graphs_.emplace(std::move(key), std::move(entry)).first;
  }
  for (const MuonStepGroup& group : groups) group.compiled->upload_step_arguments(group.matrices, stream);
  if (found->second->graph) {
    found->second->graph->launch(static_cast<CUstream>(stream));
    ++replayed_;
  } else {
    for (const MuonStepGroup& group : groups) group.compiled->enqueue_launches(stream);
  }
#else
  for (const MuonStepGroup& group : groups) group.compiled->run_muon_step(group.matrices, stream);
#endif
}

}  // namespace orthojit::runtime
