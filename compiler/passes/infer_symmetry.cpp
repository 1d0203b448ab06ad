// Pass: symmetry facts. A value is symmetric when it is X·Xᵀ (for any X), or a sum / product of
// values that are polynomials in one symmetric matrix S (they commute, and (PQ)ᵀ = QᵀPᵀ = QP = PQ).
// Each symmetric value carries the id of such an S (its commuting class); a symmetric value with no
// known S is its own S.
#include "passes/passes.h"

namespace orthojit::passes {
namespace {

ir::NodeId strip_transpose(const ir::Function& function, ir::NodeId id) {
  while (function.node(id).kind == ir::OpKind::Transpose) id = function.node(id).operands[0];
  return id;
}

}  // namespace

void infer_symmetry(ir::Function& function) {
  constexpr ir::NodeId kNone = -1;
  std::vector<ir::NodeId> commuting_class(function.nodes.size(), kNone);
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    ir::Node& node = function.nodes[i];
    const ir::NodeId self = static_cast<ir::NodeId>(i);
    auto class_of = [&](ir::NodeId id) { return commuting_class[static_cast<size_t>(id)]; };
    ir::NodeId result = kNone;
    switch (node.kind) {
      case ir::OpKind::Transpose: result = class_of(node.operands[0]); break;
      case ir::OpKind::Gemm: {
        const ir::NodeId a = node.operands[0], b = node.operands[1];
        const bool gram_product = (function.node(b).kind == ir::OpKind::Transpose && strip_transpose(function, b) == a) ||
                                  (function.node(a).kind == ir::OpKind::Transpose && strip_transpose(function, a) == b);
        const ir::NodeId c_class = node.operands.size() == 3 ? class_of(node.operands[2]) : kNone;
        if (gram_product && node.operands.size() == 2) result = self;  // X·Xᵀ starts a class of its own
        else if (class_of(a) != kNone && class_of(a) == class_of(b) && (node.operands.size() == 2 || c_class == class_of(a))) result = class_of(a);
        else if (gram_product && c_class != kNone) result = self;  // X·Xᵀ + β·C (C symmetric): symmetric, class unknown
        break;
      }
      case ir::OpKind::LinComb: {
        result = class_of(node.operands[0]);
        bool all_symmetric = true;
        for (ir::NodeId operand : node.operands) {
          if (class_of(operand) != result) result = kNone;
          all_symmetric &= class_of(operand) != kNone;
        }
        if (result == kNone && all_symmetric) result = self;  // a sum of symmetric values is symmetric
        break;
      }
      default: break;
    }
    commuting_class[i] = result;
    node.symmetric = result != kNone;
  }
}

}  // namespace orthojit::passes
