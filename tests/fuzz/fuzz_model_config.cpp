// Fuzz target: the Hugging Face config.json reader (autotune::derive_model_matrices on the parsed
// text, as cli/model_config.cpp and memory_accounting run it), whole-matrix and per-head. Every
// input is a list of matrices with positive sizes or a std::invalid_argument naming the key;
// unique_muon_shapes of a result must count every Muon matrix once.
#include <string>

#include "autotune/model_shapes.h"
#include "fuzz_target.h"

namespace at = orthojit::autotune;

ORTHOJIT_FUZZ_TARGET(model_config) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON (or a number beyond a double): runtime/model_config.cpp reports nlohmann's message
  }
  for (const bool per_head : {false, true}) {
    try {
      const at::ModelShapes shapes = at::derive_model_matrices(config, at::ModelShapeOptions{per_head});
      int64_t muon_matrices = 0;
      for (const at::ModelMatrix& matrix : shapes.matrices) {
        fuzz_check(matrix.rows >= 1 && matrix.cols >= 1 && matrix.batch >= 1 && matrix.count >= 1,
                   "matrix " + matrix.name + " has a non-positive size: " + std::to_string(matrix.rows) + "x" + std::to_string(matrix.cols) + " batch " +
                       std::to_string(matrix.batch) + " count " + std::to_string(matrix.count));
        if (matrix.muon) muon_matrices += matrix.count;
      }
      int64_t unique_count = 0;
      for (const at::UniqueShape& shape : at::unique_muon_shapes(shapes)) unique_count += shape.count;
      fuzz_check(unique_count == muon_matrices, "unique_muon_shapes counts " + std::to_string(unique_count) + " of " + std::to_string(muon_matrices));
      (void)shapes.parameters(true);
      (void)shapes.parameters(false);
    } catch (const std::invalid_argument&) {
    } catch (const std::exception& error) {
      fuzz_failure(std::string("derive_model_matrices threw something other than std::invalid_argument: ") + error.what());
    }
  }
  return 0;
}
