// The tensors of a model configuration in the order a trainer's flat buffer holds them: the
// embeddings, then layer by layer (each layer's matrices in their listed order), then the
// unembedding. Matrices listed once per layer in autotune/model_shapes.h are expanded with the
// layer index ("layers.*.q_proj" -> "layers.3.q_proj"). 1-D parameters (norms, biases) are not
// in model_shapes and not planned (well under 1% of the elements).
#pragma once

#include <vector>

#include "autotune/model_shapes.h"
#include "runtime/zero/partition_plan.h"

namespace orthojit::runtime {

std::vector<PlanTensor> model_plan_tensors(const autotune::ModelShapes& shapes);

}  // namespace orthojit::runtime
