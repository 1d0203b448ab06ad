// Fuzz target: the DSL lexer and parser (dsl::parse_program) and the semantic checks of lowering
// (ir::lower_program) on arbitrary text. Every input is either a program that lowers or a
// CompileError naming a location inside the text; nothing else may escape.
#include <string>

#include "dsl/parser.h"
#include "fuzz_target.h"
#include "ir/lower_program.h"
#include "support/source_location.h"

ORTHOJIT_FUZZ_TARGET(dsl) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const orthojit::dsl::Program program = orthojit::dsl::parse_program(text, "fuzz.oj");
    const orthojit::ir::Function lowered = orthojit::ir::lower_program(program);
    (void)lowered;
  } catch (const orthojit::CompileError& error) {
    // The location must point into the text (line 1.. and a column >= 1), or be the end of it.
    const auto& where = error.location();
    fuzz_check(where.file == "fuzz.oj", std::string("error names file '") + where.file + "': " + error.what());
    fuzz_check(where.line >= 1 && where.column >= 1, std::string("error location out of range: ") + error.what());
  } catch (const std::exception& error) {
    fuzz_failure(std::string("the DSL front end threw something other than CompileError: ") + error.what());
  }
  return 0;
}
