// The C++ builder API.
#include "dsl/program_builder.h"

#include <cmath>

#include "dsl/coefficient_sets.h"

namespace orthojit::dsl {
namespace build {
namespace {
const SourceLocation kBuilder{"<builder>", 0, 0};

E make(Expr::Kind kind, const E& lhs, const E* rhs) {
  auto node = std::make_shared<Expr>();
  node->kind = kind;
  node->location = kBuilder;
  node->lhs = lhs.expr();
  if (rhs) node->rhs = rhs->expr();
  return E(node);
}
}  // namespace

E::E(double number) {
  auto node = std::make_shared<Expr>();
  node->kind = Expr::Kind::Number;
  node->number = number;
  node->location = kBuilder;
  expr_ = node;
}
E E::T() const { return make(Expr::Kind::Transpose, *this, nullptr); }
E name(const std::string& identifier) {
  auto node = std::make_shared<Expr>();
  node->kind = Expr::Kind::Name;
  node->name = identifier;
  node->location = kBuilder;
  return E(node);
}
E operator+(const E& lhs, const E& rhs) { return make(Expr::Kind::Add, lhs, &rhs); }
E operator-(const E& lhs, const E& rhs) { return make(Expr::Kind::Subtract, lhs, &rhs); }
E operator-(const E& operand) { return make(Expr::Kind::Negate, operand, nullptr); }
E operator*(const E& lhs, const E& rhs) { return make(Expr::Kind::ScalarMultiply, lhs, &rhs); }
E operator&(const E& lhs, const E& rhs) { return make(Expr::Kind::MatMul, lhs, &rhs); }

}  // namespace build

ProgramBuilder::ProgramBuilder(std::string name) {
  program_.name = std::move(name);
  program_.location = build::name("X").expr()->location;
  program_.step_location = program_.location;
}

ProgramBuilder& ProgramBuilder::precision(PrecisionPolicy policy) {
  program_.policy = policy;
  return *this;
}

ProgramBuilder& ProgramBuilder::normalize(Normalization normalization) {
  program_.normalization = normalization;
  return *this;
}

ProgramBuilder& ProgramBuilder::coefficients(std::vector<Triple> per_step, double safety) {
  program_.steps.clear();
  for (const auto& triple : per_step) program_.steps.push_back(scale_for_safety(triple, safety));
  program_.coefficient_set.clear();
  program_.coefficient_safety = safety;
  return *this;
}

ProgramBuilder& ProgramBuilder::coefficients(Triple triple, int steps, double safety) {
  return coefficients(std::vector<Triple>(static_cast<size_t>(std::max(steps, 0)), triple), safety);
}

ProgramBuilder& ProgramBuilder::coefficients_named(const std::string& set_name, int steps, double safety) {
  const NamedCoefficientSet* set = find_coefficient_set(set_name);
  if (!set) throw CompileError(program_.location, "unknown coefficient set '" + set_name + "'");
  if (set->triples.size() == 1) {
    if (steps < 1) throw CompileError(program_.location, "coefficient set '" + set_name + "' has one triple; give the number of steps");
    coefficients(set->triples[0], steps, safety);
  } else {
    if (steps != 0 && steps != static_cast<int>(set->triples.size()))
      throw CompileError(program_.location, "coefficient set '" + set_name + "' has " + std::to_string(set->triples.size()) +
                                                " triples, but " + std::to_string(steps) + " steps were asked for");
    coefficients(set->triples, safety);
  }
  program_.coefficient_set = set_name;
  return *this;
}

ProgramBuilder& ProgramBuilder::gram_restarts(std::vector<int> restarts) {
  explicit_restarts_ = std::move(restarts);
  return *this;
}

ProgramBuilder& ProgramBuilder::let(const std::string& target, const build::E& value) {
  program_.step_body.push_back({program_.location, target, value.expr()});
  return *this;
}

Program ProgramBuilder::build() const {
  Program program = program_;
  program.gram_restarts = explicit_restarts_ ? *explicit_restarts_ : default_gram_restarts(program.steps.size());
  if (program_.steps.empty()) throw CompileError(program_.location, "program '" + program_.name + "' has no coefficient schedule");
  if (program_.step_body.empty()) throw CompileError(program_.location, "program '" + program_.name + "' has no step statements");
  for (int restart : program.gram_restarts)
    if (restart < 1 || restart >= static_cast<int>(program.steps.size()))
      throw CompileError(program_.location, "gram restart at step " + std::to_string(restart) + " is outside 1.." +
                                                std::to_string(program_.steps.size() - 1));
  return program;
}

}  // namespace orthojit::dsl
