// The hybrid Muon + AdamW optimizer (docs/muon.md): Muon for hidden matrices, AdamW for the rest,
// with the formulas of optimizer_settings.h, orthogonalization through the runtime
// (compile_orthogonalizer: tuning records, every backend), and the extensions users rely on
// (per-head and QKV split, batched experts, QK-clip).
//
// One step, for every parameter with a gradient:
//   Muon:  g (f32) → momentum M (EMA: M ← M + (1−β)(g − M); sum: M ← β·M + g)
//          → U (Nesterov: EMA lerp(g, M, β) = g + β(M − g), sum g + β·M; else M)
//          → O = NS(U) per matrix block → p ← p·(1 − lr·wd) − lr·s·O, s the lr adjustment of
//            the block's shape
//   AdamW: t ← t+1; m ← m + (1−β1)(g − m); v ← v + (1−β2)(g² − v);
//          standard:  p ← p·(1 − lr·wd) − lr · (m/bc1) / (√(v/bc2) + eps)
//          moonlight: p ← p·(1 − lr·wd) − (lr·√bc2/bc1) · m / (√v + eps)
// State is f32 (momentum_buffer; exp_avg, exp_avg_sq) plus the AdamW step count; element-wise
// arithmetic is done in f64 and rounded once to the state's and the parameter's type.
//
// A gradient with a NaN or an infinity anywhere skips the whole step: no parameter and no state
// changes, and the report names the first offending parameter.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/muon/file_progress.h"
#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/parameter.h"
#include "runtime/muon/parameter_tagging.h"
#include "runtime/muon/update_rules.h"

namespace orthojit::runtime {

struct StepReport {
  bool skipped = false;
  std::string reason;            // why the step was skipped
  int muon_updated = 0, adam_updated = 0, without_gradient = 0;
  double orthogonalize_seconds = 0;
  // The distributed optimizer with max_gradient_norm: the reduced gradient's global norm before
  // clipping (-1: not computed).
  double gradient_norm = -1;
};

struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
  bool muon = false;
  MatrixPlan matrices;        // Muon only
  int64_t state_bytes = 0;    // optimizer state held for it
};

// State bytes per group and in total (f32 buffers: Muon 4 bytes per parameter, AdamW 8).
struct StateBytes {
  int64_t muon = 0, adam = 0;
  int64_t total() const { return muon + adam; }
};

// What both optimizers (this one and DeviceOptimizer) report for one parameter, and QK-clip's
// check of its two targets, shared by every optimizer: two different parameters, each splitting
// into `heads` heads of `head_rows` rows (std::invalid_argument naming what does not).
ParameterInfo parameter_info(const Parameter& parameter, bool muon, const MatrixPlan& plan, MuonVariant variant = MuonVariant::Muon);
void check_qk_clip_targets(const Parameter& q, const Parameter& k, int64_t head_rows, size_t heads);

// A parameter that has optimizer state, for the state file (shared with DeviceOptimizer).
struct StateOwner {
  std::string name;
  std::vector<int64_t> shape;
  bool muon = false;
  MatrixPlan plan{};  // Muon: the matrices, for a variant's per-row state (muon_variants.h)
};

class HybridOptimizer {
 public:
  // Tags every parameter (parameter_tagging.h), validates it (throws std::invalid_argument naming
  // the parameter and the problem) and allocates its state (zeros).
  HybridOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings);
  ~HybridOptimizer();
  HybridOptimizer(const HybridOptimizer&) = delete;
  HybridOptimizer& operator=(const HybridOptimizer&) = delete;

  StepReport step();

  // Learning rates for schedulers (the group lr; adjustments apply on top).
  void set_learning_rates(double muon_lr, double adam_lr);
  const OptimizerSettings& settings() const { return settings_; }

  // The trainer may re-point data and gradients between steps (e.g. a new gradient buffer).
  void set_gradient(const std::string& name, const void* grad, DType grad_dtype);
  void set_data(const std::string& name, void* data);

  std::vector<ParameterInfo> parameters() const;
  StateBytes state_bytes() const;
  int64_t steps_taken() const { return steps_; }

  // QK-clip (MuonClip, Kimi K2): for each head h, γ = min(1, τ / s_max[h]); the rows of head h
  // in W_q and in W_k (head_rows each) are scaled by √γ. Call after step(). Throws
  // std::invalid_argument when a name is unknown or the shapes do not split into the heads.
  void qk_clip(const std::string& q_name, const std::string& k_name, int64_t head_rows, const std::vector<double>& s_max, double tau);

  // The state as named f32 / i64 tensors ("<param>.momentum_buffer", "<param>.exp_avg",
  // "<param>.exp_avg_sq", "<param>.step"; a variant's "<param>.second_momentum_buffer" or
  // "<param>.v_buffer" and "<param>.variant_step", muon_variants.h) and back; load checks every name, shape and type
  // against this optimizer's parameters before changing anything.
  // `progress` reports the file's phases as they advance (runtime/muon/file_progress.h).
  void save_state(const std::string& path, const FileProgressCallback& progress = {}) const;
  void load_state(const std::string& path, const FileProgressCallback& progress = {});

  // Raw access for the state file and the distributed runtime.
  struct State {
    std::vector<float> momentum;              // Muon
    std::vector<float> exp_avg, exp_avg_sq;   // AdamW
    int64_t step = 0;                         // AdamW
    std::vector<float> second_moment;         // Muon under normuon (per row) or adamuon (per element)
    int64_t variant_step = 0;                 // Muon under adamuon: its bias correction's step count
  };
  const std::map<std::string, State>& state() const { return state_; }

 private:
  std::vector<StateOwner> state_owners() const;
  struct Entry;
  // `gradient`: the parameter's, in its own type, or f32 zeros for a missing one. Muon under
  // NorMuon / AdaMuon (muon.variant); plain Muon parameters step together in step().
  void variant_update(Entry& entry, const void* gradient, DType grad_type, StepReport& report);
  void adam_update(Entry& entry, const void* gradient, DType grad_type);

  OptimizerSettings settings_;
  std::vector<Entry> entries_;
  std::map<std::string, State> state_;
  std::unique_ptr<BlockOrthogonalizer> orthogonalizer_;
  int64_t steps_ = 0;
};

}  // namespace orthojit::runtime
