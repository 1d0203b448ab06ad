// Pass: epilogue fusion. A lincomb  s·(α·A·B) [+ t·C] [+ γ·I]  whose product has no other user
// becomes one gemm D = (sα)·A·B + t·C + γ·I, computed where the lincomb was (after C exists).
// Covers Newton–Schulz's b·A + c·A·A and a·X + B·X, and Gram's Z + a·I.
#include "passes/passes.h"

namespace orthojit::passes {

void fuse_epilogues(ir::Function& function) {
  bool changed = true;
  while (changed) {  // a fused gemm may itself be the product term of a later lincomb
    changed = false;
    const auto users = ir::compute_users(function);
    for (size_t i = 0; i < function.nodes.size(); ++i) {
      ir::Node& node = function.nodes[i];
      if (node.kind != ir::OpKind::LinComb || node.operands.size() > 2) continue;
      int product_term = -1;
      for (size_t k = 0; k < node.operands.size(); ++k) {
        const ir::Node& operand = function.node(node.operands[k]);
        if (operand.kind == ir::OpKind::Gemm && operand.operands.size() == 2 && operand.gamma == 0.0 &&
            users[static_cast<size_t>(node.operands[k])].size() == 1) {
          product_term = static_cast<int>(k);
          break;
        }
      }
      if (product_term < 0) continue;
      const ir::Node product = function.node(node.operands[static_cast<size_t>(product_term)]);
      ir::Node fused = product;
      fused.alpha = product.alpha * node.coefficients[static_cast<size_t>(product_term)];
      fused.gamma = node.gamma;
      if (node.operands.size() == 2) {
        const size_t other = 1 - static_cast<size_t>(product_term);
        fused.operands.push_back(node.operands[other]);
        fused.beta = node.coefficients[other];
      }
      fused.name = node.name.empty() ? product.name : node.name;
      fused.step = node.step;
      fused.location = node.location;
      node = fused;
      changed = true;
    }
    if (changed) ir::remove_dead_nodes(function);
  }
}

}  // namespace orthojit::passes
