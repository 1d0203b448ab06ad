// The syntax tree of an orthogonalizer program, as written (DSL text or the C++ builder).
// Semantic checks and lowering to IR live in compiler/ir/lower_program.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "support/scalar_type.h"
#include "support/source_location.h"

namespace orthojit::dsl {

// One node of a per-step matrix expression.
struct Expr {
  enum class Kind { Name, Number, Add, Subtract, ScalarMultiply, MatMul, Negate, Transpose };
  Kind kind = Kind::Number;
  SourceLocation location;
  std::string name;    // Kind::Name ("X", "a", "I", a temporary)
  double number = 0;   // Kind::Number
  std::shared_ptr<const Expr> lhs, rhs;  // operands (rhs empty for unary kinds)
  int depth = 1;  // the levels of this tree (1 for a leaf); the parser bounds it
};
using ExprPtr = std::shared_ptr<const Expr>;

// `target = value;` inside the step block.
struct Statement {
  SourceLocation location;
  std::string target;
  ExprPtr value;
};

struct PrecisionPolicy {
  ScalarType storage = ScalarType::F32;     // operands and every stored intermediate
  ScalarType accumulate = ScalarType::F32;  // products accumulate in this type
  ScalarType norm = ScalarType::F32;        // the Frobenius-norm reduction
  bool operator==(const PrecisionPolicy&) const = default;
};

struct Normalization {
  // frobenius: X / (‖X‖_F·s + eps) or X / max(‖X‖_F·s, eps) (mode).
  // aol: AOL's rescaling (Prach & Lampert, arXiv 2208.03160) as Turbo-Muon's preconditioner
  //      (arXiv 2512.04632): X ← diag(d)·X with d_i = 1 / √max(Σ_j |(X·Xᵀ)_ij|, eps), on the
  //      oriented (wide) X; it bounds ‖diag(d)·X‖₂ ≤ 1 (safety and mode do not apply).
  enum class Kind { Frobenius, Aol };
  enum class Mode { Add, Clamp };  // X / (‖X‖·s + eps)  or  X / max(‖X‖·s, eps)
  // kind last, so {safety, eps, mode} still initializes a Frobenius normalization.
  double safety = 1.0;
  double eps = 1e-7;
  Mode mode = Mode::Add;
  Kind kind = Kind::Frobenius;
};

struct Triple {
  double a = 0, b = 0, c = 0;
  bool operator==(const Triple&) const = default;
};

// A validated program: what the parser or the builder produced, with the schedule expanded to one
// triple per step and the safety scaling already applied.
struct Program {
  std::string name;
  SourceLocation location;  // of the `orthogonalizer` keyword
  PrecisionPolicy policy;
  Normalization normalization;
  std::vector<Triple> steps;          // one per iteration, safety-scaled
  std::string coefficient_set;        // the named set, if one was used ("" otherwise)
  double coefficient_safety = 1.0;    // the `scaled s` factor that was applied
  std::vector<int> gram_restarts;     // restart schedule of the gram strategy (default_gram_restarts)
  std::vector<Statement> step_body;
  SourceLocation step_location;
};

// The restart schedule when a program states none: one restart before step 2 (DeepSpeed's and
// Dao-AILab's default), when the program has more than two steps.
inline std::vector<int> default_gram_restarts(size_t step_count) { return step_count > 2 ? std::vector<int>{2} : std::vector<int>{}; }

}  // namespace orthojit::dsl
