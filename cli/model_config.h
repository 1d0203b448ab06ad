// Reading a model configuration file for `tune` and `bench --model`.
#pragma once

#include <string>

#include "autotune/model_shapes.h"

namespace orthojit::cli {

// Reads and parses CONFIG.json ("default": the embedded examples/models/tiny-llama-demo.json);
// throws runtime::UsageError naming the file and the problem.
autotune::ModelShapes load_model_matrices(const std::string& path, const autotune::ModelShapeOptions& options);
// The same from the configuration's JSON text; `path` names it in errors.
autotune::ModelShapes parse_model_matrices(const std::string& text, const std::string& path, const autotune::ModelShapeOptions& options);

}  // namespace orthojit::cli
