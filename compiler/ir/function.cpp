// IR containers and graph utilities.
#include "ir/function.h"

#include <stdexcept>

namespace orthojit::ir {

std::string Dim::to_string() const { return is_known() ? std::to_string(size) : std::string(1, symbol); }

std::string Shape::to_string() const {
  if (is_known()) return rows.to_string() + "x" + cols.to_string();
  return rows.to_string() + " x " + cols.to_string();
}

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::Input: return "input";
    case OpKind::Normalize: return "normalize";
    case OpKind::Transpose: return "transpose";
    case OpKind::Gemm: return "gemm";
    case OpKind::LinComb: return "lincomb";
    case OpKind::Output: return "output";
    case OpKind::Momentum: return "momentum";
    case OpKind::Update: return "update";
  }
  return "?";
}

const char* to_string(StrategyKind kind) { return kind == StrategyKind::Gram ? "gram" : "standard"; }

std::optional<StrategyKind> parse_strategy(const std::string& text) {
  if (text == "standard") return StrategyKind::Standard;
  if (text == "gram") return StrategyKind::Gram;
  return std::nullopt;
}

NodeId Function::add(Node node) {
  for (NodeId operand : node.operands)
    if (operand < 0 || operand >= static_cast<NodeId>(nodes.size()))
      throw std::logic_error("IR: operand %" + std::to_string(operand) + " does not precede its user");
  nodes.push_back(std::move(node));
  return static_cast<NodeId>(nodes.size()) - 1;
}

namespace {
NodeId unique_of_kind(const Function& function, OpKind kind) {
  NodeId found = -1;
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    if (function.nodes[i].kind != kind) continue;
    if (found >= 0) throw std::logic_error(std::string("IR: more than one ") + to_string(kind) + " node");
    found = static_cast<NodeId>(i);
  }
  if (found < 0) throw std::logic_error(std::string("IR: no ") + to_string(kind) + " node");
  return found;
}
}  // namespace

NodeId Function::output_node() const { return unique_of_kind(*this, muon_step ? OpKind::Update : OpKind::Output); }
NodeId Function::input_node() const { return unique_of_kind(*this, OpKind::Input); }

std::vector<std::vector<NodeId>> compute_users(const Function& function) {
  std::vector<std::vector<NodeId>> users(function.nodes.size());
  for (size_t i = 0; i < function.nodes.size(); ++i)
    for (NodeId operand : function.nodes[i].operands) users[static_cast<size_t>(operand)].push_back(static_cast<NodeId>(i));
  return users;
}

void replace_all_uses(Function& function, NodeId from, NodeId to) {
  for (auto& node : function.nodes)
    for (NodeId& operand : node.operands)
      if (operand == from) operand = to;
  for (auto& step : function.steps) {
    if (step.input == from) step.input = to;
    if (step.output == from) step.output = to;
  }
}

void remove_dead_nodes(Function& function) {
  std::vector<bool> live(function.nodes.size(), false);
  for (size_t i = function.nodes.size(); i-- > 0;) {
    const Node& node = function.nodes[i];
    if (node.kind == OpKind::Output || node.kind == OpKind::Update || node.kind == OpKind::Input) live[i] = true;
    if (!live[i]) continue;
    for (NodeId operand : node.operands) live[static_cast<size_t>(operand)] = true;
  }
  std::vector<NodeId> remap(function.nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    if (!live[i]) continue;
    remap[i] = static_cast<NodeId>(kept.size());
    Node node = std::move(function.nodes[i]);
    for (NodeId& operand : node.operands) operand = remap[static_cast<size_t>(operand)];
    kept.push_back(std::move(node));
  }
  function.nodes = std::move(kept);
  for (auto& step : function.steps) {
    step.input = step.input >= 0 ? remap[static_cast<size_t>(step.input)] : -1;
    step.output = step.output >= 0 ? remap[static_cast<size_t>(step.output)] : -1;
  }
}

}  // namespace orthojit::ir
