# Writes a C++ source holding every kernels/programs/*.oj file as a string, so the shipped
# programs work from any directory. Run by CMake with -DOUTPUT=... -DPROGRAM_DIR=.../programs.
file(GLOB PROGRAMS "${PROGRAM_DIR}/*.oj")
list(SORT PROGRAMS)
set(body "// Generated from kernels/programs/*.oj by kernels/embed_programs.cmake. Do not edit.\n")
string(APPEND body "#include \"kernels/program_library.h\"\nnamespace orthojit::kernels {\nconst std::vector<ShippedProgram>& shipped_programs() {\n  static const std::vector<ShippedProgram> programs = {\n")
foreach(path IN LISTS PROGRAMS)
  get_filename_component(name "${path}" NAME_WE)
  file(READ "${path}" text)
  string(APPEND body "    {\"${name}\", \"kernels/programs/${name}.oj\", R\"orthojit_program(${text})orthojit_program\"},\n")
endforeach()
string(APPEND body "  };\n  return programs;\n}\n}  // namespace orthojit::kernels\n")
file(WRITE "${OUTPUT}.tmp" "${body}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
