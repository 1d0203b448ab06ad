// Pass: tall inputs run transposed. Every step a program can state maps X to a sum of words
// X(XᵀX)^k = (XXᵀ)^k X, i.e. X ← p(X·Xᵀ)·X = X·p(Xᵀ·X); so the iteration on Xᵀ is the transpose of
// the iteration on X, and running on the wide side keeps every square product on the small side.
#include "ir/verifier.h"
#include "passes/passes.h"

namespace orthojit::passes {

void orient(ir::Function& function) {
  if (!function.input_shape.is_known()) throw std::logic_error("orient needs specialized shapes");
  if (function.oriented || function.input_shape.rows.size <= function.input_shape.cols.size) return;
  const ir::NodeId input = function.input_node();
  const ir::NodeId output = function.output_node();

  // Rebuild with a transpose after the input and one before the output.
  ir::Function oriented = function;
  oriented.nodes.clear();
  std::vector<ir::NodeId> remap(function.nodes.size(), -1);
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    ir::Node node = function.nodes[i];
    for (auto& operand : node.operands) operand = remap[static_cast<size_t>(operand)];
    if (static_cast<ir::NodeId>(i) == output) {
      ir::Node back;
      back.kind = ir::OpKind::Transpose;
      back.operands = {node.operands[0]};
      back.name = "X (oriented back)";
      node.operands[0] = oriented.add(back);
    }
    remap[i] = oriented.add(node);
    if (static_cast<ir::NodeId>(i) == input) {
      ir::Node transposed;
      transposed.kind = ir::OpKind::Transpose;
      transposed.operands = {remap[i]};
      transposed.name = "Gᵀ (oriented)";
      remap[i] = oriented.add(transposed);
    }
  }
  for (auto& step : oriented.steps) {
    step.input = step.input >= 0 ? remap[static_cast<size_t>(step.input)] : -1;
    step.output = step.output >= 0 ? remap[static_cast<size_t>(step.output)] : -1;
  }
  oriented.oriented = true;
  ir::infer_shapes(oriented);
  function = std::move(oriented);
}

}  // namespace orthojit::passes
