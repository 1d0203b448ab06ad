// Embedded matplotlib scripts (see python_plot.h).
#include "cli/python_plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "runtime/orthogonalize.h"

extern char** environ;

namespace orthojit::cli {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

// Runs argv (argv[0] a path) as a child process, no shell in between; its stderr is kept, or sent
// to /dev/null when `quiet`. Returns its exit status, or -1 when it did not start or was killed.
int run_program(const std::vector<std::string>& argv, bool quiet) {
  std::vector<char*> args;
  for (const std::string& argument : argv) args.push_back(const_cast<char*>(argument.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet) posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t child = 0;
  const int started = posix_spawn(&child, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (started != 0) return -1;
  int status = 0;
  while (::waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::string plot_unavailable_reason(const std::string& png) {
  if (png.empty()) return "--plot needs a file name (e.g. --plot speedups.png)";
  const std::filesystem::path target(png);
  const std::filesystem::path folder = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::error_code error;
  if (!std::filesystem::is_directory(folder, error)) return "the folder " + folder.string() + " of " + png + " does not exist";
  if (std::filesystem::is_directory(target, error)) return png + " is a folder; name the image file";
  // matplotlib picks the format from the extension; an unknown one failed only after the work
  // with a Python traceback ("Format 'txt' is not supported").
  static const std::set<std::string> kFormats = {".png", ".pdf", ".svg", ".svgz", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp", ".pgf"};
  if (!kFormats.count(target.extension().string()))
    return png + " has no image extension matplotlib writes (.png, .pdf, .svg, .jpg, .eps, .tif, .webp, ...)";
  if (::access(folder.c_str(), W_OK) != 0) return "the folder " + folder.string() + " of " + png + " is not writable: " + std::strerror(errno);
  if (::access(kPython, X_OK) != 0)
    return std::string("there is no ") + kPython + ", which draws the chart with matplotlib (Debian's python3 and python3-matplotlib; scripts/install-deps.sh)";
  if (run_program({kPython, "-c", "import matplotlib"}, /*quiet=*/true) != 0)
    return std::string(kPython) + " cannot import matplotlib (install python3-matplotlib; scripts/install-deps.sh)";
  return "";
}

void run_plot_script(const char* script, const nlohmann::json& data, const std::string& png) {
  if (const std::string why = plot_unavailable_reason(png); !why.empty()) throw runtime::UsageError("cannot draw " + png + ": " + why);
  const std::string stem = (std::filesystem::temp_directory_path() / ("orthojit-plot-" + std::to_string(::getpid()))).string();
  {
    std::ofstream(stem + ".json") << data.dump();
    std::ofstream(stem + ".py") << script;
  }
  const int status = run_program({kPython, stem + ".py", stem + ".json", png}, /*quiet=*/false);
  std::filesystem::remove(stem + ".json");
  std::filesystem::remove(stem + ".py");
  if (status != 0)
    throw runtime::UsageError("drawing " + png + " failed: " + kPython + " exited with " + (status < 0 ? std::string("a signal or did not start") : std::to_string(status)) +
                              " (its message is above)");
}

}  // namespace orthojit::cli
