// The subcommands of the `orthojit` program. Each returns the process exit code and throws for an
// error: main.cpp classifies it (runtime::classify_exception) into exit 2 for bad input
// (runtime::UsageError, CompileError, std::invalid_argument, ...), an unavailable backend or a bad
// file, and exit 1 for anything internal.
#pragma once

#include <string>
#include <vector>

namespace orthojit::cli {

int run_command(const std::vector<std::string>& args);
int compile_command(const std::vector<std::string>& args);
int info_command(const std::vector<std::string>& args);
int demo_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int tune_command(const std::vector<std::string>& args);
int memory_command(const std::vector<std::string>& args);
int plan_command(const std::vector<std::string>& args);
int convert_state_command(const std::vector<std::string>& args);
int inspect_state_command(const std::vector<std::string>& args);

extern const char* const kRunHelp;
extern const char* const kCompileHelp;
extern const char* const kInfoHelp;
extern const char* const kDemoHelp;
extern const char* const kBenchHelp;
extern const char* const kTuneHelp;
extern const char* const kMemoryHelp;
extern const char* const kPlanHelp;
extern const char* const kConvertStateHelp;
extern const char* const kInspectStateHelp;

}  // namespace orthojit::cli
