// Distributed Muon + AdamW with ZeRO partitioning (docs/distributed.md), over any Communicator.
//
// One step on rank r:
//   1. gradients: the local ones (or the micro-batches accumulated since the last step) are
//      reduced: all-reduced at stage 1, reduce-scattered at stages 2 and 3 (summed, then divided
//      by the world size unless `average_gradients` is off); a NaN or infinity on any rank skips
//      the step everywhere;
//   2. Muon, per the plan's mode (partition_plan.h):
//        deepspeed  each owner of a matrix assembles its whole reduced gradient (the pieces other
//                   owners hold come by point-to-point), keeps a full momentum copy, computes NS
//                   of the whole matrix and applies its own slice;
//        balanced   owners keep the momentum of their slice and send U's pieces to the matrix's
//                   orthogonalizer, which computes NS once and sends O's pieces back;
//   3. AdamW on the rank's slice (plain ZeRO);
//   4. parameters: all-gathered at stages 1 and 2; at stage 3 they stay partitioned until
//      gather_parameters().
// The element rules and the block orthogonalizer are those of the single-rank optimizer
// (update_rules.h), so given the same reduced gradients a rank's slice is bit-identical to the
// single-rank update.
//
// Optimizer state lives in host memory; with `offload_optimizer` the orthogonalization must run
// on the host too (muon.backend cpu or ref): DeepSpeed's offload has no working Muon path.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/zero/communicator.h"
#include "runtime/zero/partition_plan.h"

namespace orthojit::runtime {

struct DeepSpeedConfig;

struct DistributedSettings {
  int stage = 1;
  OrthogonalizationMode mode = OrthogonalizationMode::DeepSpeed;
  int64_t alignment = 1;
  bool average_gradients = true;   // DeepSpeed averages over the data-parallel ranks
  bool offload_optimizer = false;  // state in host memory, NS on the CPU backend
};

// From DeepSpeed's zero_optimization section (already validated by the config reader): the
// stage, offload_optimizer {device: cpu}; NVMe offload is refused with a clear message.
DistributedSettings distributed_settings(const DeepSpeedConfig& config);

class DistributedOptimizer {
 public:
  // Every rank passes the same parameters (names, shapes, order) and settings. Throws
  // std::invalid_argument naming the problem (stage, offload with a GPU backend, ...).
  DistributedOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings, DistributedSettings distributed, Communicator& communicator);
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Adds the parameters' current gradients to the accumulation buffer (one micro-batch).
  void accumulate_gradients();
  // One optimizer step (Muon applied once, however many micro-batches were accumulated).
  StepReport step();
  // Stage 3: every rank's parameter buffers receive the other ranks' slices.
  void gather_parameters();
  // The trainer may re-point a gradient between steps (frameworks reallocate them).
  void set_gradient(const std::string& name, const void* grad, DType grad_dtype);

  const PartitionPlan& plan() const { return plan_; }
  const DistributedSettings& settings() const { return distributed_; }
  // The momentum this rank holds for a Muon parameter (deepspeed: the whole matrix on each owner;
  // balanced: its slice), or null when it holds none.
  const std::vector<float>* momentum(const std::string& name) const;
  int64_t bytes_sent_last_step() const { return bytes_last_step_; }

 private:
  struct Entry;
  void reduce_gradients(std::vector<float>& reduced);
  void muon_deepspeed(const std::vector<float>& reduced, StepReport& report);
  void muon_balanced(const std::vector<float>& reduced, StepReport& report);
  void adam(const std::vector<float>& reduced);
  void all_gather_parameters();

  OptimizerSettings settings_;
  DistributedSettings distributed_;
  Communicator& communicator_;
  PartitionPlan plan_;
  std::vector<Entry> entries_;
  std::vector<float> accumulated_;
  bool have_accumulated_ = false;
  std::unique_ptr<BlockOrthogonalizer> orthogonalizer_;
  int64_t bytes_last_step_ = 0;
};

}  // namespace orthojit::runtime
