// The C++ builder API: constructs the same dsl::Program the parser does (and so the same IR).
//
//   using namespace orthojit::dsl::build;
//   Program p = ProgramBuilder("jordan_ns5")
//                   .precision({ScalarType::BF16, ScalarType::F32, ScalarType::F32})
//                   .normalize({.safety = 1.0, .eps = 1e-7})
//                   .coefficients_named("jordan", 5)
//                   .let("A", X() & X().T())
//                   .let("B", b() * A + (c() * (A & A)))     // with E A = name("A")
//                   .let("X", a() * X() + (B & X()))
//                   .build();
//
// `&` is the matrix product (C++ has no `@`); `*` is scalar multiplication as in the DSL. `&` binds
// more loosely than `+` in C++ (unlike `@` in the DSL): parenthesize every product.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dsl/ast.h"

namespace orthojit::dsl {
namespace build {

// An expression handle.
class E {
 public:
  E(double number);  // NOLINT: numbers convert implicitly, as in the DSL
  explicit E(ExprPtr expr) : expr_(std::move(expr)) {}
  E T() const;  // transpose
  const ExprPtr& expr() const { return expr_; }

 private:
  ExprPtr expr_;
};

E name(const std::string& identifier);
inline E X() { return name("X"); }
inline E I() { return name("I"); }
inline E a() { return name("a"); }
inline E b() { return name("b"); }
inline E c() { return name("c"); }
E operator+(const E& lhs, const E& rhs);
E operator-(const E& lhs, const E& rhs);
E operator-(const E& operand);
E operator*(const E& lhs, const E& rhs);  // scalar multiplication
E operator&(const E& lhs, const E& rhs);  // matrix product

}  // namespace build

class ProgramBuilder {
 public:
  explicit ProgramBuilder(std::string name);
  ProgramBuilder& precision(PrecisionPolicy policy);
  ProgramBuilder& normalize(Normalization normalization);
  ProgramBuilder& coefficients(std::vector<Triple> per_step, double safety = 1.0);
  ProgramBuilder& coefficients(Triple triple, int steps, double safety = 1.0);
  ProgramBuilder& coefficients_named(const std::string& set, int steps = 0, double safety = 1.0);
  ProgramBuilder& gram_restarts(std::vector<int> restarts);
  ProgramBuilder& let(const std::string& target, const build::E& value);
  // Checks the schedule and restarts like the parser does; throws CompileError at "<builder>".
  // Types and shapes are checked when the program is lowered (ir::lower_program).
  Program build() const;

 private:
  Program program_;
  std::optional<std::vector<int>> explicit_restarts_;
};

}  // namespace orthojit::dsl
