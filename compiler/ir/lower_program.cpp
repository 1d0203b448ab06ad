// AST -> IR lowering with type and shape checking.
#include "ir/lower_program.h"

#include <map>

#include "dsl/parser.h"

namespace orthojit::ir {
namespace {

using dsl::Expr;

// A value during lowering: a scalar (folded to a constant, coefficients are known per step), a
// matrix node, or a multiple of the identity whose size comes from where it is used.
struct Value {
  enum class Kind { Scalar, Matrix, Identity };
  Kind kind = Kind::Scalar;
  double scalar = 0;  // Scalar: the value; Identity: the multiple of I
  NodeId node = -1;
};

std::string describe(const Function& function, const Value& value) {
  switch (value.kind) {
    case Value::Kind::Scalar: return "a scalar";
    case Value::Kind::Identity: return "the identity I";
    case Value::Kind::Matrix: return "a matrix (" + function.node(value.node).shape.to_string() + ")";
  }
  return "?";
}

class StepLowering {
 public:
  StepLowering(Function& function, int step, const dsl::Triple& triple, NodeId x, const SourceLocation& statement)
      : function_(function), step_(step), statement_(statement) {
    names_["X"] = {Value::Kind::Matrix, 0, x};
    names_["a"] = {Value::Kind::Scalar, triple.a, -1};
    names_["b"] = {Value::Kind::Scalar, triple.b, -1};
    names_["c"] = {Value::Kind::Scalar, triple.c, -1};
    names_["I"] = {Value::Kind::Identity, 1.0, -1};
  }

  // Lowers one statement; returns the new value of X (or the old one).
  void lower_statement(const dsl::Statement& statement) {
    statement_ = statement.location;
    if (statement.target == "a" || statement.target == "b" || statement.target == "c")
      throw CompileError(statement.location, "cannot assign to the coefficient '" + statement.target +
                                                 "'; choose another name for the temporary");
    if (statement.target == "I")
      throw CompileError(statement.location, "cannot assign to 'I' (the identity); choose another name");
    Value value = lower(*statement.value);
    if (value.kind == Value::Kind::Scalar)
      throw CompileError(statement.location, "'" + statement.target + "' is assigned a scalar; statements must produce matrices (use s * I for a multiple of the identity inside an expression)");
    if (value.kind == Value::Kind::Identity)
      throw CompileError(statement.location, "cannot infer the size of I assigned to '" + statement.target +
                                                 "'; combine it with a matrix (for example Z = A + 2 * I)");
    const Shape x_shape = function_.input_shape;
    if (statement.target == "X" && !(function_.node(value.node).shape == x_shape))
      throw CompileError(statement.location, "X must stay " + x_shape.to_string() + " across a step, but this statement gives " +
                                                 function_.node(value.node).shape.to_string());
    Node& node = function_.node(value.node);
    if (node.step == step_ && node.name.empty()) node.name = statement.target;
    names_[statement.target] = value;
    if (statement.target == "X") assigned_x_ = true;
  }

  bool assigned_x() const { return assigned_x_; }
  NodeId x() const { return names_.at("X").node; }

 private:
  Value lower(const Expr& expr) {
    switch (expr.kind) {
      case Expr::Kind::Number: return {Value::Kind::Scalar, expr.number, -1};
      case Expr::Kind::Name: {
        auto it = names_.find(expr.name);
        if (it == names_.end()) {
          std::string known;
          for (const auto& [name, value] : names_) known += (known.empty() ? "" : ", ") + name;
          throw CompileError(expr.location, "unknown name '" + expr.name + "'; names defined here: " + known);
        }
        return it->second;
      }
      case Expr::Kind::Negate: {
        Value operand = lower(*expr.lhs);
        if (operand.kind != Value::Kind::Matrix) return {operand.kind, -operand.scalar, -1};
        return matrix(lincomb({{-1.0, operand.node}}, 0.0, function_.node(operand.node).shape));
      }
      case Expr::Kind::Transpose: {
        Value operand = lower(*expr.lhs);
        if (operand.kind == Value::Kind::Scalar)
          throw CompileError(expr.location, "'.T' needs a matrix, found a scalar");
        if (operand.kind == Value::Kind::Identity) return operand;
        return matrix(transpose(operand.node));
      }
      case Expr::Kind::Add:
      case Expr::Kind::Subtract: return add(expr, lower(*expr.lhs), lower(*expr.rhs), expr.kind == Expr::Kind::Add ? 1.0 : -1.0);
      case Expr::Kind::ScalarMultiply: return scalar_multiply(expr, lower(*expr.lhs), lower(*expr.rhs));
      case Expr::Kind::MatMul: return matmul(expr, lower(*expr.lhs), lower(*expr.rhs));
    }
    throw CompileError(expr.location, "internal: unknown expression kind");
  }

  Value add(const Expr& expr, Value lhs, Value rhs, double sign) {
    const std::string op = sign > 0 ? "'+'" : "'-'";
    if (lhs.kind == Value::Kind::Scalar && rhs.kind == Value::Kind::Scalar) return {Value::Kind::Scalar, lhs.scalar + sign * rhs.scalar, -1};
    if (lhs.kind == Value::Kind::Scalar || rhs.kind == Value::Kind::Scalar)
      throw CompileError(expr.location, "cannot " + std::string(sign > 0 ? "add" : "subtract") + " " + describe(function_, lhs) + " and " +
                                            describe(function_, rhs) + "; write s * I for a multiple of the identity");
    if (lhs.kind == Value::Kind::Identity && rhs.kind == Value::Kind::Identity) return {Value::Kind::Identity, lhs.scalar + sign * rhs.scalar, -1};
    if (lhs.kind == Value::Kind::Identity || rhs.kind == Value::Kind::Identity) {
      const Value& matrix_value = lhs.kind == Value::Kind::Matrix ? lhs : rhs;
      const Shape shape = function_.node(matrix_value.node).shape;
      if (!shape.is_square())
        throw CompileError(expr.location, op + " of I and a " + shape.to_string() + " matrix: I is square, so the matrix must be too");
      const double matrix_sign = lhs.kind == Value::Kind::Matrix ? 1.0 : sign;
      const double identity = lhs.kind == Value::Kind::Identity ? lhs.scalar : sign * rhs.scalar;
      return matrix(lincomb({{matrix_sign, matrix_value.node}}, identity, shape));
    }
    const Shape left = function_.node(lhs.node).shape, right = function_.node(rhs.node).shape;
    if (!(left == right))
      throw CompileError(expr.location, "shapes do not match for " + op + ": " + left.to_string() + " and " + right.to_string());
    return matrix(lincomb({{1.0, lhs.node}, {sign, rhs.node}}, 0.0, left));
  }

  Value scalar_multiply(const Expr& expr, Value lhs, Value rhs) {
    if (lhs.kind != Value::Kind::Scalar && rhs.kind != Value::Kind::Scalar)
      throw CompileError(expr.location, "'*' multiplies by a scalar, but both operands are matrices (" + shape_of(lhs) + " and " +
                                            shape_of(rhs) + "); use '@' for the matrix product");
    if (lhs.kind != Value::Kind::Scalar) std::swap(lhs, rhs);
    if (rhs.kind == Value::Kind::Scalar || rhs.kind == Value::Kind::Identity) return {rhs.kind, lhs.scalar * rhs.scalar, -1};
    return matrix(lincomb({{lhs.scalar, rhs.node}}, 0.0, function_.node(rhs.node).shape));
  }

  Value matmul(const Expr& expr, Value lhs, Value rhs) {
    if (lhs.kind == Value::Kind::Scalar || rhs.kind == Value::Kind::Scalar)
      throw CompileError(expr.location, "'@' needs two matrices, found " + describe(function_, lhs) + " @ " + describe(function_, rhs) +
                                            "; use '*' to multiply by a scalar");
    if (lhs.kind == Value::Kind::Identity && rhs.kind == Value::Kind::Identity) return {Value::Kind::Identity, lhs.scalar * rhs.scalar, -1};
    if (lhs.kind == Value::Kind::Identity || rhs.kind == Value::Kind::Identity) {
      const Value& identity = lhs.kind == Value::Kind::Identity ? lhs : rhs;
      const Value& other = lhs.kind == Value::Kind::Identity ? rhs : lhs;
      if (identity.scalar == 1.0) return other;
      return matrix(lincomb({{identity.scalar, other.node}}, 0.0, function_.node(other.node).shape));
    }
    const Shape left = function_.node(lhs.node).shape, right = function_.node(rhs.node).shape;
    if (!(left.cols == right.rows))
      throw CompileError(expr.location, "shapes do not match for '@': " + left.to_string() + " @ " + right.to_string() +
                                            " (inner dimensions " + left.cols.to_string() + " and " + right.rows.to_string() + " differ)");
    Node node;
    node.kind = OpKind::Gemm;
    node.operands = {lhs.node, rhs.node};
    node.shape = {left.rows, right.cols};
    return matrix(add_node(std::move(node)));
  }

  NodeId lincomb(std::vector<std::pair<double, NodeId>> terms, double gamma, Shape shape) {
    Node node;
    node.kind = OpKind::LinComb;
    for (auto& [coefficient, operand] : terms) {
      node.coefficients.push_back(coefficient);
      node.operands.push_back(operand);
    }
    node.gamma = gamma;
    node.shape = shape;
    return add_node(std::move(node));
  }

  NodeId transpose(NodeId operand) {
    const Node& source = function_.node(operand);
    if (source.kind == OpKind::Transpose) return source.operands[0];
    Node node;
    node.kind = OpKind::Transpose;
    node.operands = {operand};
    node.shape = {source.shape.cols, source.shape.rows};
    return add_node(std::move(node));
  }

  NodeId add_node(Node node) {
    node.step = step_;
    node.location = statement_;
    return function_.add(std::move(node));
  }

  static Value matrix(NodeId node) { return {Value::Kind::Matrix, 0, node}; }
  std::string shape_of(const Value& value) const {
    return value.kind == Value::Kind::Identity ? "I" : function_.node(value.node).shape.to_string();
  }

  Function& function_;
  int step_;
  SourceLocation statement_;
  std::map<std::string, Value> names_;
  bool assigned_x_ = false;
};

}  // namespace

Function lower_program(const dsl::Program& program) {
  Function function;
  function.name = program.name;
  function.policy = program.policy;
  function.strategy.gram_restarts = program.gram_restarts;
  function.input_shape = {Dim::symbolic('m'), Dim::symbolic('n')};

  Node input;
  input.kind = OpKind::Input;
  input.shape = function.input_shape;
  input.name = "G";
  input.location = program.location;
  NodeId x = function.add(input);

  Node normalize;
  normalize.kind = OpKind::Normalize;
  normalize.operands = {x};
  normalize.shape = function.input_shape;
  normalize.normalization = program.normalization;
  normalize.norm_type = program.policy.norm;
  normalize.name = "X";
  normalize.location = program.location;
  x = function.add(normalize);

  for (size_t step = 0; step < program.steps.size(); ++step) {
    StepLowering lowering(function, static_cast<int>(step), program.steps[step], x, program.step_location);
    for (const auto& statement : program.step_body) lowering.lower_statement(statement);
    if (!lowering.assigned_x())
      throw CompileError(program.step_location, "the step block never assigns X; its last value of X is the step's result");
    StepInfo info;
    info.input = x;
    info.output = lowering.x();
    info.triple = program.steps[step];
    function.steps.push_back(info);
    x = lowering.x();
  }

  Node output;
  output.kind = OpKind::Output;
  output.operands = {x};
  output.shape = function.input_shape;
  output.location = program.location;
  function.add(output);
  remove_dead_nodes(function);
  return function;
}

dsl::Program load_program(std::string_view text, const std::string& file_name) {
  dsl::Program program = dsl::parse_program(text, file_name);
  (void)lower_program(program);  // the semantic checks
  return program;
}

}  // namespace orthojit::ir
