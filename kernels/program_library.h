// The shipped orthogonalizer programs (kernels/programs/*.oj, embedded in the binary), and
// loading a program by shipped name or by file path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "dsl/ast.h"

namespace orthojit::kernels {

struct ShippedProgram {
  std::string_view name;    // "jordan_ns5"
  std::string_view path;    // "kernels/programs/jordan_ns5.oj" (for error messages)
  std::string_view source;  // the DSL text
};

const std::vector<ShippedProgram>& shipped_programs();
const ShippedProgram* find_shipped_program(std::string_view name);

// A shipped name, else a path to a .oj file. Throws CompileError (with file:line:column for
// errors inside the program; naming the shipped programs when the name is unknown).
dsl::Program load_program_by_name_or_path(const std::string& name_or_path);

}  // namespace orthojit::kernels
