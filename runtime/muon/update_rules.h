// The update rules of the hybrid optimizer, element by element and block by block, shared by the
// single-rank optimizer (hybrid_optimizer.h) and the distributed one (runtime/zero/): the same
// functions on the same inputs give the same bits, which is how a partitioned run is
// bit-identical to a single-rank one. Formulas: hybrid_optimizer.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "ir/muon_step.h"
#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/parameter.h"
#include "runtime/muon/parameter_tagging.h"

namespace orthojit::runtime {

class CompiledOrthogonalizer;

// Parameter and gradient elements as f64, and back with one rounding (to nearest even).
double load_element(DType type, const void* base, int64_t index);
void store_element(DType type, void* base, int64_t index, double value);

// out[i] = the element i of `data` as f32 (one rounding from f64: exact for bf16, f16 and f32
// sources), for i < count, on the shared pool: the gradient as the step reads it.
void widen_to_f32(DType type, const void* data, int64_t count, float* out);
// The index of the first NaN or infinity among `count` elements, -1 when all are finite.
int64_t first_nonfinite(DType type, const void* data, int64_t count);

// The lr adjustment s of a (block) matrix of rows x cols.
double lr_scale(LrAdjust adjust, int64_t rows, int64_t cols);

// Momentum and the Nesterov update for `count` elements: momentum is updated in place (f32),
// `update` receives U (f32). The gradient is read in its own type (f32, bf16 or f16), each
// element widened as it is read: the same bits as widening it to f32 first (widening is exact).
void muon_momentum(const MuonGroupSettings& muon, DType grad_type, const void* gradient, float* momentum, float* update, int64_t count);
inline void muon_momentum(const MuonGroupSettings& muon, const float* gradient, float* momentum, float* update, int64_t count) {
  muon_momentum(muon, DType::F32, gradient, momentum, update, count);
}

// p ← p·(1 − lr·wd) − lr·s·O for the parameter's elements [begin, end); `orthogonal` holds O for
// the whole parameter (indexed like the parameter), s from the block each element is in.
void apply_muon(const MuonGroupSettings& muon, const MatrixPlan& plan, DType type, void* data, const float* orthogonal, int64_t begin, int64_t end);

// One AdamW step (step count `step`, already incremented) for the parameter's elements
// [begin, begin + count); gradient and moments are indexed from 0 for element `begin`. The
// gradient is read in its own type (f32, bf16 or f16, widened exactly as widen_to_f32 would):
// no f32 copy of it is needed.
void adam_step(const AdamGroupSettings& adam, int64_t step, DType grad_type, const void* gradient, float* exp_avg, float* exp_avg_sq, DType type,
               void* data, int64_t begin, int64_t count);
inline void adam_step(const AdamGroupSettings& adam, int64_t step, const float* gradient, float* exp_avg, float* exp_avg_sq, DType type, void* data,
                      int64_t begin, int64_t count) {
  adam_step(adam, step, DType::F32, gradient, exp_avg, exp_avg_sq, type, data, begin, count);
}

// QK-clip (MuonClip, Kimi K2). check_qk_clip throws std::invalid_argument for τ <= 0,
// head_rows <= 0 or an S_max that is negative or not finite. qk_clip_rows scales, for each head
// h with S_max[h] > τ, the head's head_rows rows (of row_length elements) by √(τ / S_max[h]);
// heads at or below τ are left untouched (not even rounded).
void check_qk_clip(int64_t head_rows, const std::vector<double>& s_max, double tau);
void qk_clip_rows(DType type, void* data, int64_t row_length, int64_t head_rows, const std::vector<double>& s_max, double tau);

// The orthogonalizer program with the settings' schedule and normalization overrides applied.
dsl::Program muon_program(const MuonGroupSettings& muon);

// O = NS(U) for every block of a parameter (blocks of equal height batched), with the compiled
// orthogonalizers cached per (batch, rows, cols).
class BlockOrthogonalizer {
 public:
  explicit BlockOrthogonalizer(MuonGroupSettings muon) : muon_(std::move(muon)) {}
  // muon_program of the constructor's settings, read once (a program file is not read again at
  // every new block shape: what was checked at build is what runs). Throws as muon_program.
  const dsl::Program& program();
  // `update` and `orthogonal` hold the whole parameter (plan.batch x plan.rows x plan.cols).
  void orthogonalize(const MatrixPlan& plan, const float* update, float* orthogonal);
  // The compiled Muon step (muon_step_launcher.h: muon_step_groups) for these settings and types.
  static ir::MuonStepSpec step_spec(const MuonGroupSettings& muon, DType grad_type, DType type);
  // Compiles now what orthogonalize will run for `plan`, so that a caller that must change
  // nothing when a compile fails (HybridOptimizer::step) can compile every parameter's kernels
  // before it updates the first. Throws as compiled().
  void prepare(const MatrixPlan& plan);
  // `step` set: the compiled Muon step of that spec; else the orthogonalizer.
  std::shared_ptr<CompiledOrthogonalizer> compiled(int64_t batch, int64_t rows, int64_t cols, const std::optional<ir::MuonStepSpec>& step = std::nullopt);
  double seconds() const { return seconds_; }

 private:
  MuonGroupSettings muon_;
  std::optional<dsl::Program> program_;
  std::map<std::string, std::shared_ptr<CompiledOrthogonalizer>> cache_;
  double seconds_ = 0;
};

}  // namespace orthojit::runtime
