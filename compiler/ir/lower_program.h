// Semantic checks and lowering of a parsed program to IR: the steps unrolled with their
// coefficients as constants, symbolic shapes m x n, primitive ops (gemm, lincomb, transpose).
#pragma once

#include <string>
#include <string_view>

#include "dsl/ast.h"
#include "ir/function.h"

namespace orthojit::ir {

// Throws CompileError (with the statement's file:line:column) for an unknown name, an operator
// applied to the wrong kind of operand, a shape mismatch, or a step that does not keep X m x n.
Function lower_program(const dsl::Program& program);

// Parses and checks a program (parse + lower); the one call tools use to load DSL text.
dsl::Program load_program(std::string_view text, const std::string& file_name = "<string>");

}  // namespace orthojit::ir
