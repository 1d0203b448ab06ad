// Model configuration files.
#include "cli/model_config.h"

#include <fstream>
#include <sstream>

#include "runtime/orthogonalize.h"

namespace orthojit::cli {

extern const char* const kDefaultModelJson;  // examples/models/tiny-llama-demo.json, embedded by cli/CMakeLists.txt

autotune::ModelShapes load_model_matrices(const std::string& path, const autotune::ModelShapeOptions& options) {
  std::stringstream text;
  if (path == "default") {
    text << kDefaultModelJson;
  } else {
    std::ifstream in(path);
    if (!in) throw runtime::UsageError("cannot read the model configuration " + path + " (or use --model default, a small embedded Llama-style model)");
    text << in.rdbuf();
  }
  return parse_model_matrices(text.str(), path, options);
}

autotune::ModelShapes parse_model_matrices(const std::string& text, const std::string& path, const autotune::ModelShapeOptions& options) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw runtime::UsageError(path + " is not valid JSON: " + error.what());
  }
  try {
    return autotune::derive_model_matrices(config, options);
  } catch (const std::invalid_argument& error) {
    throw runtime::UsageError(path + ": " + error.what());
  }
}

}  // namespace orthojit::cli
