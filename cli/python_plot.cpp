// Embedded matplotlib scripts (see python_plot.h).
#include "cli/python_plot.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/orthogonalize.h"

namespace orthojit::cli {

void run_plot_script(const char* script, const nlohmann::json& data, const std::string& png) {
  const std::string stem = (std::filesystem::temp_directory_path() / ("orthojit-plot-" + std::to_string(::getpid()))).string();
  {
    std::ofstream(stem + ".json") << data.dump();
    std::ofstream(stem + ".py") << script;
  }
  const std::string command = "/usr/bin/python3 '" + stem + ".py' '" + stem + ".json' '" + png + "'";
  const int status = std::system(command.c_str());
  std::filesystem::remove(stem + ".json");
  std::filesystem::remove(stem + ".py");
  if (status != 0)
    throw runtime::UsageError("plotting failed (" + command + "); it needs Debian's python3 with python3-matplotlib (scripts/install-deps.sh)");
}

}  // namespace orthojit::cli
