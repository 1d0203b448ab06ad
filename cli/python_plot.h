// Plots drawn by a matplotlib script embedded in the binary (Debian's python3 with
// python3-matplotlib; scripts/install-deps.sh installs it), fed the data as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace orthojit::cli {

// Why a chart could not be drawn to `png` ("" when it can): its folder is missing or not
// writable, /usr/bin/python3 is missing, or it cannot import matplotlib. Asked before the work
// whose results the chart shows, so that minutes of benchmarking are not lost to it.
std::string plot_unavailable_reason(const std::string& png);

// Runs `script` with /usr/bin/python3 as `script DATA.json PNG`, without a shell (a path holding
// quotes or `;` is one argument); throws runtime::UsageError when python3 or matplotlib is
// missing or the script fails.
void run_plot_script(const char* script, const nlohmann::json& data, const std::string& png);

}  // namespace orthojit::cli
