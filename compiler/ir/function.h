// The orthojit IR: a small SSA graph of matrix operations with shapes, element types, symmetry
// and buffer facts. Nodes are kept in topological order (an operand always precedes its user).
//
// Op set (deliberately tiny; see docs/architecture.md):
//   input      the user's matrix (f32/f64, read-only)
//   normalize  X / (‖X‖_F·s + eps) or X / max(‖X‖_F·s, eps): norm reduced in the norm type,
//              applied before the cast to the storage type
//   transpose  a view (no storage): swaps the strides of its operand
//   gemm       D = α·A·B + β·C + γ·I  (C optional; γ only for square D); accumulates in the
//              accumulate type and stores D in its storage type
//   lincomb    D = Σ cᵢ·Vᵢ + γ·I  (elementwise; a scale is a lincomb of one term)
// The identity never is a node: lowering folds it into the γ of the op that uses it.
//   output     the result written back to the user (through a transpose view when oriented)
// A Muon step (Function::muon_step set; ir/muon_step.h) replaces the ends of the iteration:
//   momentum   after the input (the gradient g): M ← momentum(M, g) on the optimizer's f32 state,
//              its value U (f32) the matrix the iteration normalizes
//   update     in place of the output: the parameter p ← p·decay − step·O in p's own type, O the
//              last X (through the transpose view when oriented)
// `fused` marks a momentum computed inside its normalize (no storage for U) and an update
// computed in the epilogue of the op that makes the last X (no storage for it): the backends emit
// no launch for a fused node.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "ir/muon_step.h"
#include "support/scalar_type.h"
#include "support/source_location.h"

namespace orthojit::ir {

// A dimension: a concrete size after shape specialization, or the symbol 'm' / 'n' before.
struct Dim {
  int64_t size = -1;  // -1 while symbolic
  char symbol = 0;    // 'm' or 'n' while symbolic
  static Dim symbolic(char name) { return {-1, name}; }
  static Dim of(int64_t value) { return {value, 0}; }
  bool is_known() const { return size >= 0; }
  bool operator==(const Dim& other) const { return size == other.size && symbol == other.symbol; }
  std::string to_string() const;
};

struct Shape {
  Dim rows, cols;
  bool operator==(const Shape&) const = default;
  bool is_square() const { return rows == cols; }
  bool is_known() const { return rows.is_known() && cols.is_known(); }
  int64_t elements() const { return rows.size * cols.size; }  // valid when known
  std::string to_string() const;  // "m x n" / "256x1024"
};

enum class OpKind { Input, Normalize, Transpose, Gemm, LinComb, Output, Momentum, Update };
const char* to_string(OpKind kind);

using NodeId = int;

struct Node {
  OpKind kind = OpKind::Input;
  std::vector<NodeId> operands;  // gemm: A, B[, C]; lincomb: terms; others: 0 or 1
  Shape shape;
  ScalarType type = ScalarType::F32;        // storage type of the value
  ScalarType accumulate = ScalarType::F32;  // gemm / lincomb / normalize arithmetic
  // gemm: D = alpha·A·B + beta·C + gamma·I.   lincomb: D = Σ coefficients[i]·operands[i] + gamma·I
  double alpha = 1.0, beta = 0.0, gamma = 0.0;
  std::vector<double> coefficients;
  // normalize
  dsl::Normalization normalization;
  ScalarType norm_type = ScalarType::F32;
  // Facts set by passes.
  bool symmetric = false;  // the value equals its transpose (triangular products may compute half)
  int buffer = -1;         // storage slot from buffer planning (-1: none, a view, or external)
  bool fused = false;      // momentum / update computed inside its user / producer (fuse_update_rules)
  // Provenance, for dumps and error messages.
  int step = -1;         // the iteration this node belongs to (-1: prologue / epilogue)
  std::string name;      // DSL name it was assigned to (X, A, B, Q, R, Z, ...)
  SourceLocation location;
};

// What odd-polynomial recognition found for one step: X_next = p(X·Xᵀ)·X with
// p(A) = Σ polynomial[k]·A^k. `blocker` names the statement that prevents the form.
struct StepInfo {
  NodeId input = -1;   // X at the start of the step
  NodeId output = -1;  // X at the end of the step
  dsl::Triple triple;  // the step's coefficients
  bool recognized = false;
  std::vector<double> polynomial;
  SourceLocation blocker;
  std::string blocker_reason;
};

// Strategy and its data. Later backends add tile configurations next to these; they are data,
// chosen by the autotuner, and the passes read them.
enum class StrategyKind { Standard, Gram };
const char* to_string(StrategyKind kind);
std::optional<StrategyKind> parse_strategy(const std::string& text);

struct Strategy {
  StrategyKind kind = StrategyKind::Standard;
  std::vector<int> gram_restarts;  // steps before which gram restarts (X ← Q·X, R ← X·Xᵀ, Q ← I); from the program
  bool triangular_products = true;    // symmetric products compute one triangle and mirror it
};

struct Buffer {
  int64_t elements = 0;
  ScalarType type = ScalarType::F32;
};

struct Function {
  std::string name;
  dsl::PrecisionPolicy policy;
  Strategy strategy;
  Shape input_shape;   // the user's m x n (symbolic until specialized)
  int64_t batch = 1;   // same-shape matrices processed together
  bool oriented = false;  // true when the input was tall and the body works on its transpose
  std::optional<MuonStepSpec> muon_step;  // set: a Muon step (momentum ... update), not an orthogonalizer
  std::vector<Node> nodes;
  std::vector<StepInfo> steps;
  std::vector<Buffer> buffers;
  std::vector<std::string> applied_passes;

  NodeId add(Node node);
  const Node& node(NodeId id) const { return nodes.at(static_cast<size_t>(id)); }
  Node& node(NodeId id) { return nodes.at(static_cast<size_t>(id)); }
  NodeId output_node() const;  // the unique sink: the Output node, or the Update of a Muon step
  NodeId input_node() const;   // the unique Input node
};

// Users of each node (indices into nodes).
std::vector<std::vector<NodeId>> compute_users(const Function& function);

// Rewrites every use of `from` to `to` (nodes after `from` only; topological order holds).
void replace_all_uses(Function& function, NodeId from, NodeId to);

// Removes nodes that do not reach the Output and renumbers (keeps order; remaps step info).
void remove_dead_nodes(Function& function);

}  // namespace orthojit::ir
