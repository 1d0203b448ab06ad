// Pass: buffer planning. Walks the nodes in order, frees a slot once the last user of its value
// (through any transpose view) has run, and gives each new value the smallest free slot of its
// type that fits. A value's slot is taken before its own operands are freed, so a result never
// aliases an operand: gemm's C and D differ and X ping-pongs between two slots.
#include <limits>

#include "passes/passes.h"

namespace orthojit::passes {
namespace {

bool needs_storage(ir::OpKind kind) {
  return kind == ir::OpKind::Normalize || kind == ir::OpKind::Gemm || kind == ir::OpKind::LinComb || kind == ir::OpKind::Momentum;
}

}  // namespace

void plan_buffers(ir::Function& function) {
  const size_t count = function.nodes.size();
  std::vector<ir::NodeId> root(count);
  for (size_t i = 0; i < count; ++i) {
    const ir::Node& node = function.nodes[i];
    root[i] = node.kind == ir::OpKind::Transpose ? root[static_cast<size_t>(node.operands[0])] : static_cast<ir::NodeId>(i);
  }
  std::vector<size_t> last_use(count, 0);
  for (size_t i = 0; i < count; ++i)
    for (ir::NodeId operand : function.nodes[i].operands) last_use[static_cast<size_t>(root[static_cast<size_t>(operand)])] = i;

  // Values computed in place of their storage: a fused momentum (inside its normalize) and the
  // last X of a fused update (written straight into the parameter).
  std::vector<bool> stored(count, true);
  for (size_t i = 0; i < count; ++i) {
    const ir::Node& node = function.nodes[i];
    if (node.kind == ir::OpKind::Momentum && node.fused) stored[i] = false;
    if (node.kind == ir::OpKind::Update && node.fused) stored[static_cast<size_t>(root[static_cast<size_t>(node.operands[0])])] = false;
  }

  function.buffers.clear();
  std::vector<bool> busy;
  std::vector<ir::NodeId> holder;  // the value living in each busy slot
  for (size_t i = 0; i < count; ++i) {
    ir::Node& node = function.nodes[i];
    node.buffer = -1;
    if (!needs_storage(node.kind) || !stored[i]) continue;
    // Free slots whose value's last use is strictly before this node.
    for (size_t b = 0; b < busy.size(); ++b)
      if (busy[b] && last_use[static_cast<size_t>(holder[b])] < i) busy[b] = false;
    const int64_t elements = node.shape.elements();
    int best = -1;
    int64_t best_size = std::numeric_limits<int64_t>::max();
    for (size_t b = 0; b < busy.size(); ++b) {
      const ir::Buffer& buffer = function.buffers[b];
      if (busy[b] || buffer.type != node.type || buffer.elements < elements || buffer.elements >= best_size) continue;
      best = static_cast<int>(b);
      best_size = buffer.elements;
    }
    if (best < 0) {
      function.buffers.push_back({elements, node.type});
      busy.push_back(false);
      holder.push_back(-1);
      best = static_cast<int>(function.buffers.size()) - 1;
    }
    busy[static_cast<size_t>(best)] = true;
    holder[static_cast<size_t>(best)] = static_cast<ir::NodeId>(i);
    node.buffer = best;
  }
}

}  // namespace orthojit::passes
