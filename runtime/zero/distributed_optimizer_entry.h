// One parameter as the distributed optimizer holds it: shared by the step
// (distributed_optimizer.cpp) and the state between steps (distributed_state.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/zero/distributed_optimizer.h"

namespace orthojit::runtime {

struct DistributedOptimizer::Entry {
  Parameter parameter;
  bool muon = false;
  MatrixPlan matrices;
  size_t tensor = 0;       // index in plan_.tensors
  int64_t lo = 0, hi = 0;  // this rank's slice of the tensor's elements (empty: lo == hi)
  // Addresses in memory_ (0: not held here), f32.
  std::uintptr_t momentum = 0;              // Muon: whole (deepspeed) or slice (balanced)
  std::uintptr_t exp_avg = 0, exp_avg_sq = 0;  // AdamW: the slice
  // balanced: the matrices of the batch this rank orthogonalizes (ascending), their U assembled
  // and their O, packed one after another; U and O of this rank's slice.
  std::vector<int64_t> mine;
  std::uintptr_t update = 0, assembled = 0, result = 0, slice_result = 0;
  int64_t step = 0;
};

}  // namespace orthojit::runtime
