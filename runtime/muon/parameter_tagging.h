// Which parameters Muon takes, and as which matrices.
//
// Default rule (DeepSpeed's set_optimizer_flags, also Moonlight's and Keller Jordan's choice):
// Muon iff ndim >= 2 and the lower-cased name contains neither "embed" nor "lm_head"; only
// parameters that require gradients are optimized at all. An explicit Parameter::use_muon
// overrides the rule, but a Muon-tagged tensor with fewer than 2 dimensions is an error.
#pragma once

#include <string>
#include <vector>

#include "runtime/muon/parameter.h"

namespace orthojit::runtime {

bool default_use_muon(const std::string& name, const std::vector<int64_t>& shape);

// A contiguous block of a parameter's matrix view that is orthogonalized on its own.
struct MatrixBlock {
  int64_t row_offset = 0, rows = 0;
};

// How Muon sees one parameter: `batch` matrices of rows x cols (experts), each cut into row
// blocks (QKV and per-head splits; one block covering all rows when there is no split).
struct MatrixPlan {
  int64_t batch = 1, rows = 0, cols = 0;
  std::vector<MatrixBlock> blocks;
};

// Throws std::invalid_argument naming the parameter: a Muon tensor with ndim < 2, row splits
// that do not sum to the rows, a head size that does not divide a block, a zero dimension.
MatrixPlan plan_matrices(const Parameter& parameter, bool experts_as_batch);

}  // namespace orthojit::runtime
