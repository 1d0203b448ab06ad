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
#include "runtime/muon/update_rules.h"
#include "runtime/orthogonalize.h"

namespace orthojit::runtime {

struct MuonStepGroup {
  std::shared_ptr<CompiledOrthogonalizer> compiled;  // a Muon step, batch = matrices.size()
  std::vector<ir::MuonStepMatrix> matrices;
};

// One parameter's whole Muon step, at addresses of one memory space (host pointers or
// CUdeviceptr values): an f32 or 16-bit gradient, the f32 momentum, the parameter in its type.
struct MuonStepTensor {
  const MatrixPlan* plan = nullptr;
  DType grad_type = DType::F32;
  std::uintptr_t grad = 0, momentum = 0;
  DType param_type = DType::F32;
  std::uintptr_t param = 0;
};

// The blocks of every tensor (each matrix of the batch, each row block), grouped by (rows,
// cols, gradient type, parameter type) into one compiled Muon step per group, with each block's
// addresses and scalars (β, lr·s with s from the block's shape, 1 − lr·wd) from `muon`, the
// current settings; `orthogonalizer` compiles and caches them. Shared by the device optimizer
// and the distributed one, so both batch and compute alike.
std::vector<MuonStepGroup> muon_step_groups(BlockOrthogonalizer& orthogonalizer, const MuonGroupSettings& muon, const std::vector<MuonStepTensor>& tensors);

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
