// orthojit: the command-line program (build/bin/orthojit). Exit codes: 0 ok, 2 bad input, usage,
// an unavailable backend or a bad file, 1 internal error (runtime::cli_exit_code).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "runtime/errors.h"

namespace {

const char* const kMainHelp = R"(orthojit — JIT compiler, autotuner and runtime for matrix orthogonalization (Newton–Schulz,
Polar Express, Gram Newton–Schulz) and the Muon optimizer.

usage: orthojit <command> [options]

commands:
  run       orthogonalize a matrix (or a batch) read from a .npy file
  compile   lower a program for a shape and print its IR (after any pass)
  info      version, backends, CPU features, shipped programs
  demo      every shipped program on a random matrix: singular values, standard vs gram
  bench     time a program on a shape and backend: median/p20/p80, GFLOP/s, fraction of peak;
            with --model: NS vs Gram vs the vendor library for every shape of a model
  tune      tune every matrix shape of a model (or one shape) and write tuning records
  memory    optimizer-state memory of a model: AdamW alone vs hybrid Muon + AdamW
  plan      ZeRO partition plan of a model for N ranks: straddling matrices, NS work, bytes moved
  convert-state  converts the momentum buffers of a saved optimizer state (sum <-> EMA form)
  inspect-state  what a saved optimizer state holds, and whether its data is intact

Run `orthojit <command> --help` for a command's options. Programs are written in the orthojit
DSL (docs/dsl.md); the shipped ones are listed by `orthojit info`.
)";

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& arg : args)
    if (arg == "--help" || arg == "-h") return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace orthojit;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kMainHelp, stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::printf("orthojit %s\n", ORTHOJIT_VERSION);
    return 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  struct Entry {
    const char* name;
    int (*run)(const std::vector<std::string>&);
    const char* help;
  };
  const Entry entries[] = {{"run", cli::run_command, cli::kRunHelp},
                           {"compile", cli::compile_command, cli::kCompileHelp},
                           {"info", cli::info_command, cli::kInfoHelp},
                           {"demo", cli::demo_command, cli::kDemoHelp},
                           {"bench", cli::bench_command, cli::kBenchHelp},
                           {"tune", cli::tune_command, cli::kTuneHelp},
                           {"memory", cli::memory_command, cli::kMemoryHelp},
                           {"plan", cli::plan_command, cli::kPlanHelp},
                           {"convert-state", cli::convert_state_command, cli::kConvertStateHelp},
                           {"inspect-state", cli::inspect_state_command, cli::kInspectStateHelp}};
  for (const auto& entry : entries) {
    if (command != entry.name) continue;
    if (wants_help(args)) {
      std::fputs(entry.help, stdout);
      return 0;
    }
    try {
      return entry.run(args);
    } catch (...) {
      // One classification for the CLI, the C API and Python (runtime/errors.h): the exit code
      // and the message's form follow the error's kind.
      const runtime::ClassifiedError error = runtime::classify_exception(std::current_exception());
      const int code = runtime::cli_exit_code(error.kind);
      if (error.located) {
        std::fprintf(stderr, "orthojit %s: %s\n", entry.name, error.message.c_str());  // "file:line:col: error: ..."
      } else if (error.kind == runtime::ErrorKind::BadInput || error.kind == runtime::ErrorKind::Unavailable) {
        std::fprintf(stderr, "orthojit %s: error: %s\n(see `orthojit %s --help`)\n", entry.name, error.message.c_str(), entry.name);
      } else if (code == 2) {
        std::fprintf(stderr, "orthojit %s: error: %s\n", entry.name, error.message.c_str());
      } else {
        std::fprintf(stderr, "orthojit %s: internal error: %s\n", entry.name, error.message.c_str());
      }
      return code;
    }
  }
  std::string names;
  for (const auto& entry : entries) names += (names.empty() ? "" : ", ") + std::string(entry.name);
  std::fprintf(stderr, "orthojit: unknown command '%s'; expected one of %s (see `orthojit --help`)\n", command.c_str(), names.c_str());
  return 2;
}
