// ZeRO partitioning for the hybrid optimizer (docs/distributed.md): parameters laid into one flat buffer
// (each aligned, the total padded to a multiple of world·alignment) and split into equal
// contiguous partitions, one per data-parallel rank. Stage 1 partitions the optimizer state,
// stage 2 the gradients too, stage 3 the parameters too.
//
// Muon needs the whole reduced gradient of a matrix, and a matrix may straddle a partition
// boundary, so the plan also says who orthogonalizes each matrix:
//   deepspeed  every rank that owns a piece computes the whole matrix (momentum copy on each),
//              as DeepSpeed's stage 1/2 does;
//   balanced   each matrix exactly once, on the rank chosen by longest-processing-time on its
//              cost (m²·n, m <= n), the result then gathered to the owners. The units are the
//              matrices, not the tensors: each matrix of a batched tensor (the experts of a
//              layer) is an independent Newton-Schulz problem with its own orthogonalizer, so
//              the work keeps balancing when ranks outnumber the tensors.
// Host-only arithmetic: the plan is tested (and printed by `orthojit plan`) without any rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orthojit::runtime {

struct PlanTensor {
  std::string name;
  int64_t elements = 0;
  bool muon = false;
  int64_t batch = 1, rows = 0, cols = 0;  // Muon: batch matrices of rows x cols
};

enum class OrthogonalizationMode { DeepSpeed, Balanced };
const char* to_string(OrthogonalizationMode mode);

struct PlanSettings {
  int world = 1;
  int stage = 1;             // 1, 2 or 3
  OrthogonalizationMode mode = OrthogonalizationMode::DeepSpeed;
  int64_t alignment = 1;     // elements; every tensor starts at a multiple of it
  int64_t state_bytes_muon = 4, state_bytes_adam = 8;     // per element of optimizer state
  int64_t parameter_bytes = 2, gradient_bytes = 2;        // bf16 training by default
};

struct PlannedTensor {
  PlanTensor tensor;
  int64_t offset = 0;                // in the flat buffer
  std::vector<int> owners;           // ranks whose partition holds part of it, ascending
  std::vector<int> orthogonalizers;  // Muon: ranks that compute its NS (deepspeed: the owners), ascending
  // balanced: the rank that orthogonalizes each of its batch matrices (matrix b is elements
  // [b·rows·cols, (b+1)·rows·cols) of the tensor); empty otherwise.
  std::vector<int> matrix_orthogonalizers;
  double cost = 0;                   // Muon: batch·m²·n (the NS work scale)
  bool straddles() const { return owners.size() > 1; }
};

struct RankSummary {
  int64_t begin = 0, end = 0;        // its partition of the flat buffer
  double orthogonalization_cost = 0; // sum of the costs of the matrices it orthogonalizes
  int matrices = 0;                  // matrices it orthogonalizes (each of a batch counted)
  int64_t optimizer_bytes = 0;       // Muon momentum (whole matrices it orthogonalizes) + AdamW moments of its slice
  int64_t gradient_bytes = 0, parameter_bytes = 0;  // what it holds of each (full or partitioned by stage)
  // The range of the flat buffer whose reduced gradient it holds: stage 1 all of it; stages 2-3
  // its partition, widened in deepspeed mode to the whole of every Muon matrix it orthogonalizes
  // (the pieces other owners reduced arrive there). gradient_bytes is this range times g.
  int64_t gradient_begin = 0, gradient_end = 0;
};

struct CollectiveBytes {
  std::string name;      // "reduce-scatter gradients", ...
  int64_t bytes = 0;     // sent per rank per step (ring algorithms)
  std::string formula;
};

struct PartitionPlan {
  PlanSettings settings;
  int64_t padded_elements = 0, partition_elements = 0;
  std::vector<PlannedTensor> tensors;
  std::vector<RankSummary> ranks;
  std::vector<CollectiveBytes> collectives;
  double ideal_cost() const;        // total orthogonalization cost / world
  double max_cost() const;
  double mean_cost() const;
};

// Throws std::invalid_argument for world < 1, a stage outside 1..3, alignment < 1, a tensor with
// no elements or a Muon tensor whose matrices do not multiply to its elements.
PartitionPlan plan_partitions(const std::vector<PlanTensor>& tensors, const PlanSettings& settings);

}  // namespace orthojit::runtime
