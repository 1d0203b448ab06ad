// Plots drawn by a matplotlib script embedded in the binary (Debian's python3 with
// python3-matplotlib; scripts/install-deps.sh installs it), fed the data as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace orthojit::cli {

// Runs `script` with /usr/bin/python3 as `script DATA.json PNG`; throws runtime::UsageError when
// python3 or matplotlib is missing or the script fails.
void run_plot_script(const char* script, const nlohmann::json& data, const std::string& png);

}  // namespace orthojit::cli
