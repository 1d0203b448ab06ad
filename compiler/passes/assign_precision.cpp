// Pass: precision assignment from the policy. The input is read in f32 (f64 under an f64
// policy); normalize reduces the norm in the norm type, scales in f32 and only then rounds to the
// storage type (casting first would overflow f16 for loss-scaled gradients); products accumulate
// in the accumulate type and store in the storage type; the output widens the last X back.
#include "passes/passes.h"

namespace orthojit::passes {

void assign_precision(ir::Function& function) {
  const dsl::PrecisionPolicy& policy = function.policy;
  const ScalarType external = policy.storage == ScalarType::F64 ? ScalarType::F64 : ScalarType::F32;
  for (auto& node : function.nodes) {
    switch (node.kind) {
      case ir::OpKind::Input:
        // A Muon step reads the gradient in its own type (one read, no conversion pass).
        node.type = function.muon_step ? function.muon_step->grad : external;
        node.accumulate = function.muon_step ? ScalarType::F32 : external;
        break;
      case ir::OpKind::Output:
        node.type = external;
        node.accumulate = external;
        break;
      case ir::OpKind::Momentum:  // the f32 state and U, computed in f64 (muon_step.h)
        node.type = ScalarType::F32;
        node.accumulate = ScalarType::F64;
        break;
      case ir::OpKind::Update:  // the parameter, computed in f64, rounded once
        node.type = function.muon_step->param;
        node.accumulate = ScalarType::F64;
        break;
      case ir::OpKind::Transpose: node.type = function.node(node.operands[0]).type; break;
      case ir::OpKind::Normalize:
        node.type = policy.storage;
        node.accumulate = policy.accumulate;
        node.norm_type = policy.norm;
        break;
      case ir::OpKind::Gemm:
      case ir::OpKind::LinComb:
        node.type = policy.storage;
        node.accumulate = policy.accumulate;
        break;
    }
  }
}

}  // namespace orthojit::passes
