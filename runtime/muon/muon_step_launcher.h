// Runs a step's compiled Muon steps (one per group of equal-shape blocks, compiler/ir/muon_step.h)
// in order. On the device, when asked, the launches of the whole sequence are captured once
// into a CUDA graph and replayed: a step's uploads of argument blocks (pointers and scalars: they
// change every step) go on the stream first, then one graph launch. A different sequence of
// compiled steps (a shape, dtype or setting changed: other executables) is captured anew; a
// capture that fails is reported once on stderr and that sequence runs without a graph.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "ir/muon_step.h"
#include "runtime/orthogonalize.h"

namespace orthojit::runtime {

struct MuonStepGroup {
  std::shared_ptr<CompiledOrthogonalizer> compiled;  // a Muon step, batch = matrices.size()
  std::vector<ir::MuonStepMatrix> matrices;
};

class MuonStepLauncher {
 public:
  MuonStepLauncher();
  ~MuonStepLauncher();
  MuonStepLauncher(const MuonStepLauncher&) = delete;
  MuonStepLauncher& operator=(const MuonStepLauncher&) = delete;

  // Host groups run in order on their backends; device groups are enqueued on `stream` (a
  // CUstream) without synchronizing, as one CUDA graph when `graphs` is set.
  void run(const std::vector<MuonStepGroup>& groups, void* stream, bool graphs);

  int graphs_captured() const { return captured_; }
  int graph_launches() const { return replayed_; }

 private:
  struct Graph;
  std::map<std::vector<const CompiledOrthogonalizer*>, std::unique_ptr<Graph>> graphs_;
  int captured_ = 0, replayed_ = 0;
};

}  // namespace orthojit::runtime
