// Model configuration files (runtime/model_config.h).
#include "runtime/model_config.h"

#include <fstream>
#include <sstream>

#include "autotune/json_depth.h"

#include "runtime/orthogonalize.h"

namespace orthojit::runtime {

extern const char* const kDefaultModelJson;  // examples/models/tiny-llama-demo.json, embedded by runtime/CMakeLists.txt

std::string read_model_config(const std::string& path) {
  if (path == "default") return kDefaultModelJson;
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read the model configuration " + path + " (or use --model default, a small embedded Llama-style model)");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

autotune::ModelShapes load_model_matrices(const std::string& path, const autotune::ModelShapeOptions& options) {
  return parse_model_matrices(read_model_config(path), path, options);
}

autotune::ModelShapes parse_model_matrices(const std::string& text, const std::string& path, const autotune::ModelShapeOptions& options) {
  if (const std::string deep = autotune::json_depth_problem(text); !deep.empty()) throw UsageError(path + ": " + deep);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for a number beyond a double
    throw UsageError(path + " is not valid JSON: " + error.what());
  }
  try {
    return autotune::derive_model_matrices(config, options);
  } catch (const std::invalid_argument& error) {
    throw UsageError(path + ": " + error.what());
  } catch (const nlohmann::json::exception& error) {
    // A field of a type the reader does not check by name: still the file's fault, not ours.
    throw UsageError(path + ": a field has the wrong type (" + std::string(error.what()) + ")");
  }
}

}  // namespace orthojit::runtime
