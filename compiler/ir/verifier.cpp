// IR verifier and shape rules.
#include "ir/verifier.h"

#include <stdexcept>

namespace orthojit::ir {

Shape result_shape(const Function& function, const Node& node) {
  auto operand_shape = [&](size_t k) { return function.node(node.operands.at(k)).shape; };
  switch (node.kind) {
    case OpKind::Input: return node.shape;
    case OpKind::Normalize:
    case OpKind::LinComb:
    case OpKind::Output:
    case OpKind::Momentum:
    case OpKind::Update: return operand_shape(0);
    case OpKind::Transpose: return {operand_shape(0).cols, operand_shape(0).rows};
    case OpKind::Gemm: return {operand_shape(0).rows, operand_shape(1).cols};
  }
  return node.shape;
}

void infer_shapes(Function& function) {
  for (auto& node : function.nodes) {
    if (node.kind == OpKind::Input) {
      node.shape = function.input_shape;
      continue;
    }
    node.shape = result_shape(function, node);
  }
}

namespace {
[[noreturn]] void fail(const std::string& context, NodeId id, const std::string& what) {
  throw std::logic_error("IR verification failed after " + context + ": %" + std::to_string(id) + ": " + what);
}

NodeId storage_root(const Function& function, NodeId id) {
  while (function.node(id).kind == OpKind::Transpose) id = function.node(id).operands[0];
  return id;
}
}  // namespace

void verify_function(const Function& function, const std::string& context) {
  int inputs = 0, outputs = 0, momenta = 0, updates = 0;
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    const NodeId id = static_cast<NodeId>(i);
    const Node& node = function.nodes[i];
    for (NodeId operand : node.operands)
      if (operand < 0 || operand >= id) fail(context, id, "operand %" + std::to_string(operand) + " does not precede its user");
    size_t expected_operands = 1;
    switch (node.kind) {
      case OpKind::Input: expected_operands = 0; ++inputs; break;
      case OpKind::Output: ++outputs; break;
      case OpKind::Momentum:
        ++momenta;
        if (!function.muon_step) fail(context, id, "momentum outside a Muon step");
        if (function.node(storage_root(function, node.operands[0])).kind != OpKind::Input) fail(context, id, "momentum of something other than the gradient");
        break;
      case OpKind::Update:
        ++updates;
        if (!function.muon_step) fail(context, id, "update outside a Muon step");
        if (node.fused) {
          const Node& producer = function.node(storage_root(function, node.operands[0]));
          if (producer.kind != OpKind::Gemm && producer.kind != OpKind::LinComb) fail(context, id, "a fused update needs a product or lincomb to fuse into");
          if (producer.buffer >= 0) fail(context, id, "the value a fused update consumes has a buffer");
        }
        break;
      case OpKind::Gemm: expected_operands = node.operands.size() == 3 ? 3 : 2; break;
      case OpKind::LinComb:
        expected_operands = node.operands.size();
        if (node.operands.empty()) fail(context, id, "lincomb without terms");
        if (node.coefficients.size() != node.operands.size()) fail(context, id, "lincomb coefficient count differs from its terms");
        break;
      default: break;
    }
    if (node.operands.size() != expected_operands) fail(context, id, "wrong number of operands for " + std::string(to_string(node.kind)));
    if (node.kind == OpKind::Gemm) {
      const Shape a = function.node(node.operands[0]).shape, b = function.node(node.operands[1]).shape;
      if (!(a.cols == b.rows)) fail(context, id, "gemm inner dimensions differ: " + a.to_string() + " @ " + b.to_string());
      if (node.operands.size() == 3 && !(function.node(node.operands[2]).shape == node.shape)) fail(context, id, "gemm C shape differs from D");
    }
    if (node.kind == OpKind::LinComb)
      for (NodeId operand : node.operands)
        if (!(function.node(operand).shape == node.shape)) fail(context, id, "lincomb terms of different shapes");
    if (node.kind != OpKind::Input && !(result_shape(function, node) == node.shape))
      fail(context, id, "shape " + node.shape.to_string() + " but the op gives " + result_shape(function, node).to_string());
    if ((node.gamma != 0.0 || node.symmetric) && !node.shape.is_square()) fail(context, id, "identity term or symmetry on a non-square value");
    if (node.buffer >= 0) {
      if (node.buffer >= static_cast<int>(function.buffers.size())) fail(context, id, "buffer index out of range");
      const Buffer& buffer = function.buffers[static_cast<size_t>(node.buffer)];
      if (node.shape.is_known() && buffer.elements < node.shape.elements()) fail(context, id, "buffer too small");
      if (buffer.type != node.type) fail(context, id, "buffer type differs from the value type");
      for (NodeId operand : node.operands) {
        const Node& root = function.node(storage_root(function, operand));
        if (root.buffer == node.buffer) fail(context, id, "result buffer aliases operand %" + std::to_string(operand));
      }
    }
  }
  if (function.muon_step) {
    if (inputs != 1 || outputs != 0 || momenta != 1 || updates != 1)
      throw std::logic_error("IR verification failed after " + context + ": a Muon step needs one input, one momentum, one update and no output");
  } else if (inputs != 1 || outputs != 1 || momenta != 0 || updates != 0) {
    throw std::logic_error("IR verification failed after " + context + ": need one input and one output");
  }
}

}  // namespace orthojit::ir
