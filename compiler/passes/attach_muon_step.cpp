// Pass: a Muon step around the iteration. The gradient input gets the momentum op after it (the
// iteration normalizes U, not g) and the output becomes the parameter update, so the whole Muon
// step of one matrix is one function: the later passes orient, rewrite and plan it like any
// orthogonalizer, and fuse_update_rules moves its two ends into the first and last kernels.
#include "passes/passes.h"

namespace orthojit::passes {

void attach_muon_step(ir::Function& function, const ir::MuonStepSpec& spec) {
  if (const std::string problem = ir::muon_step_spec_problem(spec); !problem.empty()) throw std::invalid_argument(problem);
  if (function.muon_step) throw std::logic_error("attach_muon_step: the function already is a Muon step");
  const ir::NodeId input = function.input_node();
  const ir::NodeId output = function.output_node();
  ir::Function step = function;
  step.nodes.clear();
  step.muon_step = spec;
  std::vector<ir::NodeId> remap(function.nodes.size(), -1);
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    ir::Node node = function.nodes[i];
    for (auto& operand : node.operands) operand = remap[static_cast<size_t>(operand)];
    if (static_cast<ir::NodeId>(i) == output) {
      node.kind = ir::OpKind::Update;
      node.name = "p";
    }
    remap[i] = step.add(node);
    if (static_cast<ir::NodeId>(i) == input) {
      ir::Node momentum;
      momentum.kind = ir::OpKind::Momentum;
      momentum.operands = {remap[i]};
      momentum.shape = node.shape;
      momentum.name = "U";
      momentum.location = node.location;
      remap[i] = step.add(momentum);
    }
  }
  for (auto& info : step.steps) {
    info.input = info.input >= 0 ? remap[static_cast<size_t>(info.input)] : -1;
    info.output = info.output >= 0 ? remap[static_cast<size_t>(info.output)] : -1;
  }
  function = std::move(step);
}

}  // namespace orthojit::passes
