// Looking up shipped programs and loading user programs from files.
#include "kernels/program_library.h"

#include <fstream>
#include <sstream>

#include "ir/lower_program.h"

namespace orthojit::kernels {

const ShippedProgram* find_shipped_program(std::string_view name) {
  for (const auto& program : shipped_programs())
    if (program.name == name) return &program;
  return nullptr;
}

dsl::Program load_program_by_name_or_path(const std::string& name_or_path) {
  if (const ShippedProgram* shipped = find_shipped_program(name_or_path))
    return ir::load_program(shipped->source, std::string(shipped->path));
  std::ifstream file(name_or_path, std::ios::binary);
  if (!file) {
    std::string names;
    for (const auto& program : shipped_programs()) names += (names.empty() ? "" : ", ") + std::string(program.name);
    throw CompileError({}, "'" + name_or_path + "' is neither a shipped program nor a readable file; shipped programs: " + names);
  }
  std::stringstream text;
  text << file.rdbuf();
  return ir::load_program(text.str(), name_or_path);
}

}  // namespace orthojit::kernels
