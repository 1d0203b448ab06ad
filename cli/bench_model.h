// `orthojit bench --model` / `--compare`: standard vs gram vs the vendor library per shape.
#pragma once

#include <string>
#include <vector>

namespace orthojit::cli {

int bench_model_command(const std::vector<std::string>& args);

}  // namespace orthojit::cli
