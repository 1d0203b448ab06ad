// Model configuration files (a Hugging Face config.json, or "default": the embedded
// examples/models/tiny-llama-demo.json) for tune, bench --model, plan and memory, from the CLI
// and from Python alike.
#pragma once

#include <string>

#include "autotune/model_shapes.h"

namespace orthojit::runtime {

// The text of CONFIG.json, or the embedded default model for "default". Throws UsageError naming
// the file when it cannot be read.
std::string read_model_config(const std::string& path);

// Reads and parses CONFIG.json ("default": the embedded model); throws UsageError naming the file
// and the problem.
autotune::ModelShapes load_model_matrices(const std::string& path, const autotune::ModelShapeOptions& options);
// The same from the configuration's JSON text; `path` names it in errors.
autotune::ModelShapes parse_model_matrices(const std::string& text, const std::string& path, const autotune::ModelShapeOptions& options);

}  // namespace orthojit::runtime
