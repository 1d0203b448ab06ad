// A step's compiled Muon steps, with CUDA graph replay (see muon_step_launcher.h).
#include "runtime/muon/muon_step_launcher.h"

#include <cstdio>
#include <map>
#include <tuple>

#ifdef ORTHOJIT_HAVE_CUDA
#include "cuda/cuda_graph.h"
#include "cuda/stream_order.h"
#endif

namespace orthojit::runtime {

std::vector<MuonStepGroup> muon_step_groups(BlockOrthogonalizer& orthogonalizer, const MuonGroupSettings& muon, const std::vector<MuonStepTensor>& tensors) {
  const double decay = 1.0 - muon.lr * muon.weight_decay;
  std::map<std::tuple<int64_t, int64_t, int, int>, std::vector<ir::MuonStepMatrix>> groups;
  for (const MuonStepTensor& tensor : tensors) {
    const MatrixPlan& plan = *tensor.plan;
    const int64_t matrix_elements = plan.rows * plan.cols;
    for (int64_t matrix = 0; matrix < plan.batch; ++matrix)
      for (const MatrixBlock& block : plan.blocks) {
        const int64_t first = matrix * matrix_elements + block.row_offset * plan.cols;
        const auto [scale_rows, scale_cols] = scale_shape(plan, block);
        ir::MuonStepMatrix io;
        io.grad = tensor.grad + static_cast<std::uintptr_t>(first * dtype_bytes(tensor.grad_type));
        io.momentum = tensor.momentum + static_cast<std::uintptr_t>(first * 4);
        io.param = tensor.param + static_cast<std::uintptr_t>(first * dtype_bytes(tensor.param_type));
        io.beta = muon.momentum;
        io.step = muon.lr * lr_scale(muon.lr_adjust, scale_rows, scale_cols);
        io.decay = decay;
        groups[{block.rows, plan.cols, static_cast<int>(tensor.grad_type), static_cast<int>(tensor.param_type)}].push_back(io);
      }
  }
  std::vector<MuonStepGroup> launches;
  for (auto& [key, matrices] : groups) {
    const auto [rows, cols, grad_type, param_type] = key;
    const ir::MuonStepSpec spec = BlockOrthogonalizer::step_spec(muon, static_cast<DType>(grad_type), static_cast<DType>(param_type));
    MuonStepGroup group;
    group.compiled = orthogonalizer.compiled(static_cast<int64_t>(matrices.size()), rows, cols, spec);
    group.matrices = std::move(matrices);
    launches.push_back(std::move(group));
  }
  return launches;
}

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
#ifdef ORTHOJIT_HAVE_CUDA
  if (cuda::synchronize_each_launch()) graphs = false;  // each launch waited for: nothing to capture
#endif
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
  // Every group's shared runner is held from its argument upload to the launch that reads it, and
  // this stream waits for their previous uses elsewhere (cuda/stream_order.h).
  std::vector<cuda::StreamOrder*> orders;
  for (const MuonStepGroup& group : groups) orders.push_back(group.compiled->stream_order());
  const cuda::StreamOrder::Uses uses(std::move(orders), static_cast<CUstream>(stream));
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
