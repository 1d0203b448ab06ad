// Pass: strategy lowering. `standard` keeps the program's statements. `gram` rewrites the steps
// into Gram Newton–Schulz (Dao-AILab / DeepSpeed form) from the recognized polynomials p_k:
//
//   R = X·Xᵀ;  Q = none
//   for k: if k is a restart: X ← Q·X; R ← X·Xᵀ; Q ← none
//          Z = p_k(R)                       (Horner; the first product fuses c·R² + b·R + a·I)
//          Q = Z if none else Q·Z           (Z, Q, R are polynomials in one R: they commute)
//          if the next step continues:  R ← Z·(R·Z)   (X_{k+1} = Z·X_k ⇒ R_{k+1} = Z·R_k·Z)
//   X_out = Q·X
//
// Every m x m product is between polynomials in the same R, hence symmetric (infer_symmetry).
#include <algorithm>
#include <string>

#include "passes/passes.h"

namespace orthojit::passes {
namespace {

class GramBuilder {
 public:
  GramBuilder(ir::Function& out, const SourceLocation& location) : out_(out), location_(location) {}

  ir::NodeId gemm(ir::NodeId a, ir::NodeId b, const std::string& name, double alpha = 1.0, ir::NodeId c = -1, double beta = 0.0,
                  double gamma = 0.0) {
    ir::Node node;
    node.kind = ir::OpKind::Gemm;
    node.operands = {a, b};
    if (c >= 0) node.operands.push_back(c);
    node.alpha = alpha;
    node.beta = beta;
    node.gamma = gamma;
    node.shape = {out_.node(a).shape.rows, out_.node(b).shape.cols};
    return add(std::move(node), name);
  }
  ir::NodeId lincomb(ir::NodeId v, double coefficient, double gamma, const std::string& name) {
    ir::Node node;
    node.kind = ir::OpKind::LinComb;
    node.operands = {v};
    node.coefficients = {coefficient};
    node.gamma = gamma;
    node.shape = out_.node(v).shape;
    return add(std::move(node), name);
  }
  ir::NodeId transpose(ir::NodeId v) {
    ir::Node node;
    node.kind = ir::OpKind::Transpose;
    node.operands = {v};
    node.shape = {out_.node(v).shape.cols, out_.node(v).shape.rows};
    return add(std::move(node), "");
  }
  // Z = p(R) by Horner, with the top three coefficients in one fused product.
  ir::NodeId polynomial(const std::vector<double>& p, ir::NodeId r) {
    const size_t degree = p.size() - 1;
    if (degree == 0) return lincomb(r, 0.0, p[0], "Z");
    if (degree == 1) return lincomb(r, p[1], p[0], "Z");
    ir::NodeId z = gemm(r, r, "Z", p[degree], r, p[degree - 1], p[degree - 2]);
    for (size_t j = degree - 2; j-- > 0;) z = gemm(z, r, "Z", 1.0, -1, 0.0, p[j]);
    return z;
  }
  int step = -1;

 private:
  ir::NodeId add(ir::Node node, const std::string& name) {
    node.name = name;
    node.step = step;
    node.location = location_;
    return out_.add(std::move(node));
  }
  ir::Function& out_;
  SourceLocation location_;
};

}  // namespace

void apply_strategy(ir::Function& function) {
  if (function.strategy.kind == ir::StrategyKind::Standard || function.steps.empty()) return;
  const int step_count = static_cast<int>(function.steps.size());
  for (int k = 0; k < step_count; ++k) {
    const ir::StepInfo& info = function.steps[static_cast<size_t>(k)];
    if (!info.recognized)
      throw CompileError(info.blocker, "the gram strategy needs every step in the form X <- p(X·Xᵀ)·X, but step " + std::to_string(k) +
                                           " is not: " + (info.blocker_reason.empty() ? "this statement breaks the form" : info.blocker_reason) +
                                           " (or run it with --strategy standard)");
  }
  std::vector<int> restarts = function.strategy.gram_restarts;
  std::sort(restarts.begin(), restarts.end());
  for (int restart : restarts)
    if (restart < 1 || restart >= step_count)
      throw CompileError({}, "gram restart at step " + std::to_string(restart) + " is outside 1.." + std::to_string(step_count - 1) +
                                 " (a restart happens before the step with that index)");
  auto is_restart = [&](int k) { return std::binary_search(restarts.begin(), restarts.end(), k); };

  const ir::NodeId first_input = function.steps.front().input;
  const ir::NodeId last_output = function.steps.back().output;
  ir::Function out = function;
  out.nodes.clear();
  std::vector<ir::NodeId> remap(function.nodes.size(), -1);
  for (ir::NodeId i = 0; i <= first_input; ++i) {  // prologue: input, orientation, normalize
    ir::Node node = function.nodes[static_cast<size_t>(i)];
    for (auto& operand : node.operands) operand = remap[static_cast<size_t>(operand)];
    remap[static_cast<size_t>(i)] = out.add(node);
  }

  GramBuilder gram(out, function.node(last_output).location);
  ir::NodeId x = remap[static_cast<size_t>(first_input)];
  gram.step = 0;
  ir::NodeId r = gram.gemm(x, gram.transpose(x), "R");
  ir::NodeId q = -1;
  for (int k = 0; k < step_count; ++k) {
    gram.step = k;
    if (k > 0 && is_restart(k)) {
      x = gram.gemm(q, x, "X (restart)");
      r = gram.gemm(x, gram.transpose(x), "R");
      q = -1;
    }
    const ir::NodeId z = gram.polynomial(function.steps[static_cast<size_t>(k)].polynomial, r);
    q = q < 0 ? z : gram.gemm(q, z, "Q");
    if (k + 1 < step_count && !is_restart(k + 1)) r = gram.gemm(z, gram.gemm(r, z, "RZ"), "R");
  }
  gram.step = step_count - 1;
  const ir::NodeId result = gram.gemm(q, x, "X (= Q·X)");
  remap[static_cast<size_t>(last_output)] = result;

  for (size_t i = static_cast<size_t>(last_output) + 1; i < function.nodes.size(); ++i) {  // epilogue
    ir::Node node = function.nodes[i];
    if (node.step >= 0) continue;
    for (auto& operand : node.operands) {
      operand = remap[static_cast<size_t>(operand)];
      if (operand < 0) throw std::logic_error("apply_strategy: the epilogue uses a value from inside the steps");
    }
    remap[i] = out.add(node);
  }
  for (auto& info : out.steps) info.input = info.output = -1;  // steps are no longer single X values
  out.strategy.gram_restarts = restarts;
  ir::remove_dead_nodes(out);
  function = std::move(out);
}

}  // namespace orthojit::passes
