// The hyperparameters and formula choices of the hybrid Muon + AdamW optimizer, and the presets
// that reproduce each system users come from (shared/reference/muon-semantics.md):
//
//              momentum  nesterov         NS                         lr adjustment             AdamW
//   deepspeed  EMA       lerp(g, M, β)    gram (f16, restart @2)     sqrt(max(1, r/c))         β (0.9, 0.95), eps 1e-10, m̂/(√v̂+eps)
//   keller     sum       g + μ·buf        jordan bf16, 5 steps       sqrt(max(1, r/c))         β (0.9, 0.95), eps 1e-10, m̂/(√v̂+eps)
//   moonlight  sum       g + μ·buf        jordan bf16, 5 steps       0.2·sqrt(max(r, c))       β (0.95, 0.95), eps 1e-8, (m/(√v+eps))·√bc2/bc1
//   torch      EMA       lerp(g, M, β)    jordan bf16, norm clamped  sqrt(max(1, r/c))         torch.optim.AdamW: β (0.9, 0.999), eps 1e-8
//
// Weight decay is decoupled everywhere, p ← p·(1 − lr·wd), with the unadjusted lr. Every choice is
// also a field, so a preset is only a starting point.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "support/scalar_type.h"

namespace orthojit::runtime {

enum class MomentumKind { Ema, Sum };
enum class LrAdjust { None, Original, MatchRmsAdamW, Spectral };
enum class AdamFormula { Standard, Moonlight };

const char* to_string(MomentumKind kind);
const char* to_string(LrAdjust adjust);
const char* to_string(AdamFormula formula);
std::optional<MomentumKind> parse_momentum_kind(const std::string& text);  // "ema" | "sum"
std::optional<LrAdjust> parse_lr_adjust(const std::string& text);          // "none" | "original" | "match_rms_adamw" | "spectral"
std::optional<AdamFormula> parse_adam_formula(const std::string& text);    // "standard" | "moonlight"

struct MuonGroupSettings {
  double lr = 0.02;
  double momentum = 0.95;
  bool nesterov = true;
  double weight_decay = 0;
  MomentumKind momentum_kind = MomentumKind::Ema;
  LrAdjust lr_adjust = LrAdjust::Original;
  // The orthogonalizer: a shipped program name or a .oj path, its strategy, storage override.
  std::string program = "jordan_ns5";
  std::string strategy = "standard";  // standard | gram | auto (tuning records / heuristic)
  std::optional<ScalarType> precision;
  std::optional<std::vector<int>> gram_restarts;
  // Overrides of the program's schedule: ns_steps repeats a constant schedule (or the given
  // coefficients) that many times; coefficients replace every step's triple.
  std::optional<int> ns_steps;
  std::optional<dsl::Triple> coefficients;
  std::optional<double> ns_eps;  // the normalization's eps
  bool norm_clamp = false;       // X / max(‖X‖, eps) instead of X / (‖X‖ + eps) (torch.optim.Muon)
  bool square_uses_standard = true;  // gram on a square matrix runs standard (DeepSpeed) ...
  std::optional<ScalarType> square_precision;  // ... with this storage (DeepSpeed: bf16, its standard NS)
  std::string backend = "cpu";       // ref | cpu | cuda
  int threads = 0;
};

struct AdamGroupSettings {
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-10;
  double weight_decay = 0;
  AdamFormula formula = AdamFormula::Standard;
};

struct OptimizerSettings {
  std::string preset = "deepspeed";
  MuonGroupSettings muon;
  AdamGroupSettings adam;
  bool experts_as_batch = false;  // MatrixLayout::Auto for 3-D+ tensors: Batch (true) or Flatten
};

// "deepspeed", "keller", "moonlight", "torch"; throws std::invalid_argument naming the presets.
OptimizerSettings preset_settings(const std::string& name);
std::vector<std::string> preset_names();

// One line per setting ("muon.lr = 0.02"), for logs and `orthojit memory`.
std::string describe(const OptimizerSettings& settings);

// Applies "key=value" overrides (muon.lr, muon.momentum, muon.nesterov, muon.weight_decay,
// muon.momentum_kind, muon.lr_adjust, muon.program, muon.strategy, muon.precision, muon.ns_steps,
// muon.ns_eps, muon.norm_clamp, muon.backend, muon.threads, adam.lr, adam.beta1, adam.beta2,
// adam.eps, adam.weight_decay, adam.formula, experts_as_batch). Throws std::invalid_argument naming the key and what is valid.
void apply_setting(OptimizerSettings& settings, const std::string& key, const std::string& value);

}  // namespace orthojit::runtime
