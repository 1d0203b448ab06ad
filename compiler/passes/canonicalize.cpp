// Pass: canonical form for pattern matching.
//  * gemm(s·A, B) → s·gemm(A, B): scalar factors of operands move into α;
//  * a lincomb term that is itself a lincomb with no other user is inlined (Σ of Σ flattens;
//    a shared one stays, or inlining would recompute it and grow the sums step after step);
//  * a lincomb term that is a gemm with α ≠ 1 and one user folds α into the term's coefficient;
//  * repeated terms merge; a lincomb `1·V` (no identity) is replaced by V.
#include <map>

#include "passes/passes.h"

namespace orthojit::passes {
namespace {

bool is_pure_scale(const ir::Node& node) {
  return node.kind == ir::OpKind::LinComb && node.operands.size() == 1 && node.gamma == 0.0;
}

}  // namespace

void canonicalize(ir::Function& function) {
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    // Operands never change after their users are visited (topological order), so one forward
    // sweep reaches a fixed point.
    ir::Node node = function.nodes[i];
    if (node.kind == ir::OpKind::Gemm) {
      for (size_t k = 0; k < 2; ++k) {
        while (true) {
          const ir::Node& operand = function.node(node.operands[k]);
          if (!is_pure_scale(operand)) break;
          node.alpha *= operand.coefficients[0];
          node.operands[k] = operand.operands[0];
        }
      }
    }
    if (node.kind == ir::OpKind::LinComb) {
      const auto users = ir::compute_users(function);
      std::vector<std::pair<ir::NodeId, double>> terms;
      auto add_term = [&terms](ir::NodeId operand, double coefficient) {
        for (auto& term : terms)
          if (term.first == operand) {
            term.second += coefficient;
            return;
          }
        terms.emplace_back(operand, coefficient);
      };
      for (size_t k = 0; k < node.operands.size(); ++k) {
        const ir::Node& operand = function.node(node.operands[k]);
        const double coefficient = node.coefficients[k];
        const bool single_user = users[static_cast<size_t>(node.operands[k])].size() == 1;
        if (operand.kind == ir::OpKind::LinComb && single_user) {
          for (size_t t = 0; t < operand.operands.size(); ++t) add_term(operand.operands[t], coefficient * operand.coefficients[t]);
          node.gamma += coefficient * operand.gamma;
        } else if (operand.kind == ir::OpKind::Gemm && operand.alpha != 1.0 && operand.operands.size() == 2 &&
                   operand.gamma == 0.0 && single_user) {
          const double alpha = operand.alpha;
          function.node(node.operands[k]).alpha = 1.0;
          add_term(node.operands[k], coefficient * alpha);
        } else {
          add_term(node.operands[k], coefficient);
        }
      }
      node.operands.clear();
      node.coefficients.clear();
      for (auto& [operand, coefficient] : terms) {
        node.operands.push_back(operand);
        node.coefficients.push_back(coefficient);
      }
      if (node.operands.empty()) throw std::logic_error("canonicalize: lincomb lost every term");
    }
    function.nodes[i] = node;
    if (is_pure_scale(node) && node.coefficients[0] == 1.0) {
      // Keep the DSL name on the value that now stands for it.
      ir::Node& target = function.node(node.operands[0]);
      if (target.step == node.step && !node.name.empty()) target.name = node.name;
      ir::replace_all_uses(function, static_cast<ir::NodeId>(i), node.operands[0]);
    }
  }
  ir::remove_dead_nodes(function);
}

}  // namespace orthojit::passes
