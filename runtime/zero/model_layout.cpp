// Model configuration -> flat-buffer order (see model_layout.h).
#include "runtime/zero/model_layout.h"

#include <algorithm>

namespace orthojit::runtime {

std::vector<PlanTensor> model_plan_tensors(const autotune::ModelShapes& shapes) {
  std::vector<PlanTensor> head, layered, tail;
  auto tensor = [](const autotune::ModelMatrix& matrix, const std::string& name) {
    PlanTensor planned;
    planned.name = name;
    planned.elements = matrix.rows * matrix.cols * matrix.batch;
    planned.muon = matrix.muon;
    planned.batch = matrix.batch;
    planned.rows = matrix.rows;
    planned.cols = matrix.cols;
    return planned;
  };
  int64_t layers = 0;
  for (const auto& matrix : shapes.matrices)
    if (matrix.name.find('*') != std::string::npos) layers = std::max(layers, matrix.count);
  std::vector<PlanTensor> ordered;
  // Embeddings (not per layer) first, the unembedding last.
  for (const auto& matrix : shapes.matrices)
    if (matrix.name.find('*') == std::string::npos && matrix.name.rfind("lm_head", 0) != 0)
      for (int64_t copy = 0; copy < matrix.count; ++copy) ordered.push_back(tensor(matrix, matrix.count > 1 ? matrix.name + "." + std::to_string(copy) : matrix.name));
  for (int64_t layer = 0; layer < layers; ++layer)
    for (const auto& matrix : shapes.matrices) {
      const size_t star = matrix.name.find('*');
      if (star == std::string::npos) continue;
      // A matrix present in fewer layers: the dense MLPs before first_k_dense_replace sit in the
      // first layers, the MoE matrices (router, experts, shared experts) in the last ones.
      const bool late = matrix.name.find("dense layers") == std::string::npos;
      const int64_t first = late ? layers - matrix.count : 0;
      if (layer < first || layer >= first + matrix.count) continue;
      std::string name = matrix.name;
      name.replace(star, 1, std::to_string(layer));
      ordered.push_back(tensor(matrix, name));
    }
  for (const auto& matrix : shapes.matrices)
    if (matrix.name.find('*') == std::string::npos && matrix.name.rfind("lm_head", 0) == 0)
      for (int64_t copy = 0; copy < matrix.count; ++copy) ordered.push_back(tensor(matrix, matrix.name));
  return ordered;
}

}  // namespace orthojit::runtime
