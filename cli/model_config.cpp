// Model configuration files.
#include "cli/model_config.h"

#include <fstream>
#include <sstream>

#include "runtime/orthogonalize.h"

namespace orthojit::cli {

autotune::ModelShapes load_model_matrices(const std::string& path, const autotune::ModelShapeOptions& options) {
  std::ifstream in(path);
  if (!in) throw runtime::UsageError("cannot read the model configuration " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text.str());
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
