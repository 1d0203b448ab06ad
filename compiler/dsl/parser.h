// Parses one orthogonalizer program from DSL text (grammar: docs/dsl.md).
//
// The parser checks everything that does not need matrix shapes: the sections, the precision
// policy, the normalization arguments, the coefficient schedule (names, lengths, step counts).
// Expression types and shapes are checked when the program is lowered (ir/lower_program.h);
// `load_program` in ir/ does both.
#pragma once

#include <string>
#include <string_view>

#include "dsl/ast.h"

namespace orthojit::dsl {

// Throws CompileError naming file:line:column, what was found and what was expected.
Program parse_program(std::string_view text, const std::string& file_name = "<string>");

}  // namespace orthojit::dsl
