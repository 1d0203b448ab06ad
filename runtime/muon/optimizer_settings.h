// The hyperparameters and formula choices of the hybrid Muon + AdamW optimizer, and the presets
// that reproduce each system users come from. Sources: DeepSpeed
// deepspeed/runtime/zero/muon/{original_muon.py, muon_optimizer.py}; KellerJordan/Muon muon.py
// (current: EMA momentum since early 2025); MoonshotAI/Moonlight examples/toy_train.py;
// torch.optim.Muon (PyTorch >= 2.9). docs/muon.md has the full table, with every departure.
//
//              momentum  nesterov         NS                             lr adjustment          >2-D tensors  grad None  tagging
//   deepspeed  EMA       lerp(g, M, β)    gram (f16, restart @2; square  sqrt(max(1, r/c))      trailing      zeros      deepspeed
//                                         matrices: standard, in f16)
//   keller     EMA       lerp(g, M, β)    jordan bf16, 5 steps           sqrt(max(1, r/c))      trailing      zeros      deepspeed
//   moonlight  sum       g + μ·buf        jordan bf16, 5 steps           0.2·sqrt(max(r, c))    flatten       skip       moonlight
//   torch      EMA       lerp(g, M, β)    jordan bf16, norm clamped      sqrt(max(1, r/c))      flatten       skip       deepspeed
//
//   AdamW: deepspeed, keller β (0.9, 0.95), eps 1e-10, m̂/(√v̂+eps); moonlight β (0.95, 0.95),
//   eps 1e-8, (m/(√v+eps))·√bc2/bc1; torch: torch.optim.AdamW's β (0.9, 0.999), eps 1e-8.
//
// Weight decay is decoupled everywhere, p ← p·(1 − lr·wd), with the unadjusted lr. Every choice is
// also a field, so a preset is only a starting point.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "runtime/muon/parameter.h"
#include "runtime/muon/parameter_tagging.h"
#include "support/scalar_type.h"

namespace orthojit::runtime {

enum class MomentumKind { Ema, Sum };
enum class LrAdjust { None, Original, MatchRmsAdamW, Spectral };
enum class AdamFormula { Standard, Moonlight };
// What a step does with a parameter whose gradient is missing (null; Python: grad is None).
//   skip  the parameter and its state are left as they are (Moonlight, torch.optim.Muon)
//   zero  the gradient is taken as zeros and the full step runs: momentum decays and still moves
//         the parameter, weight decay applies, AdamW's step count advances (DeepSpeed, Keller
//         Jordan: `p.grad = torch.zeros_like(p)  # Force synchronization`)
enum class MissingGradient { Skip, Zero };

const char* to_string(MomentumKind kind);
const char* to_string(LrAdjust adjust);
const char* to_string(AdamFormula formula);
std::optional<MomentumKind> parse_momentum_kind(const std::string& text);  // "ema" | "sum"
std::optional<LrAdjust> parse_lr_adjust(const std::string& text);          // "none" | "original" | "match_rms_adamw" | "spectral"
std::optional<AdamFormula> parse_adam_formula(const std::string& text);    // "standard" | "moonlight"
const char* to_string(MissingGradient policy);
std::optional<MissingGradient> parse_missing_gradient(const std::string& text);  // "skip" | "zero"

// What a Muon step does with the orthogonalized matrix O before the lr adjustment (formulas and
// sources: runtime/muon/muon_variants.h, docs/muon.md "Variants"):
//   muon     O as Newton–Schulz made it
//   normuon  NorMuon (arXiv 2510.05491): O divided row by row by the root of an EMA of its rows'
//            mean squares, then rescaled to O's Frobenius norm
//   adamuon  AdaMuon (arXiv 2507.11005): sign(U) orthogonalized (the paper; sign_momentum), O
//            divided element by element by the root of a bias-corrected EMA of O², then rescaled
//            to the Frobenius norm sqrt(min(rows, cols)) of an orthogonal matrix
enum class MuonVariant { Muon, NorMuon, AdaMuon };
const char* to_string(MuonVariant variant);
std::optional<MuonVariant> parse_muon_variant(const std::string& text);  // "muon" | "normuon" | "adamuon"

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
  std::optional<ScalarType> square_precision;  // ... with this storage (unset: the gram storage, f16 under DeepSpeed)
  std::string backend = "auto";      // auto (ref for f64 storage, else cpu) | ref | cpu | cuda
  int threads = 0;
  // The variant and its second moment's β2 and eps (unset: the variant's published defaults,
  // NorMuon 0.95 and 1e-10, AdaMuon 0.999 and 1e-8; muon_variants.h).
  MuonVariant variant = MuonVariant::Muon;
  std::optional<double> variant_beta2;
  std::optional<double> variant_eps;
  bool sign_momentum = true;  // adamuon: NS(sign(U)) as the paper; false: NS(U) as Chongjie-Si/AdaMuon adamuon.py
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
  // How a tensor of 3+ dimensions whose Parameter::layout is Auto becomes matrices
  // (parameter.h): Flatten, Batch (experts) or Trailing (DeepSpeed and Keller Jordan).
  MatrixLayout tensor_layout = MatrixLayout::Trailing;
  ConvScale conv_scale = ConvScale::Kernel;  // Trailing, 4-D filters: where the lr adjustment comes from
  MissingGradient missing_gradient = MissingGradient::Zero;
  TaggingRule tagging = TaggingRule::DeepSpeed;
};

// The momentum_buffer of one form as the other would hold it after the same gradients with a
// constant β: sum B_t = β·B_{t-1} + g_t and EMA M_t = β·M_{t-1} + (1−β)·g_t give M_t = (1−β)·B_t
// exactly (by induction from B_0 = M_0 = 0), so a saved buffer converts by one multiplication
// (one f32 rounding). Under a momentum schedule (β changing between steps) no conversion is exact.
double momentum_conversion_factor(MomentumKind from, MomentumKind to, double beta);

// The most worker threads muon.threads (and DeepSpeed's "threads") may ask for: more is a typo,
// not a machine (0 means one per core).
constexpr int kMaxMuonThreads = 4096;

// One of muon_presets() (runtime/muon/presets.h); throws std::invalid_argument naming them.
OptimizerSettings preset_settings(const std::string& name);
std::vector<std::string> preset_names();

// One line per setting ("muon.lr = 0.02"), for logs and `orthojit memory`: each key one that
// apply_setting takes, with its value (settings left to the program or the variant say so in
// parentheses; a "  # ..." tail explains a value).
std::string describe(const OptimizerSettings& settings);

// Applies "key=value" overrides (muon.lr, muon.momentum, muon.nesterov, muon.weight_decay,
// muon.momentum_kind, muon.lr_adjust, muon.program, muon.strategy, muon.precision, muon.ns_steps,
// muon.ns_eps, muon.norm_clamp, muon.backend, muon.threads, muon.variant, muon.beta2,
// muon.variant_eps, muon.sign_momentum, adam.lr, adam.beta1, adam.beta2,
// adam.eps, adam.weight_decay, adam.formula, tensor_layout, conv_scale, missing_grad, tagging,
// and experts_as_batch: true = tensor_layout batch, false = flatten). Numbers are decimal.
// Throws std::invalid_argument naming the key and what is valid, and then leaves `settings` as
// it was.
void apply_setting(OptimizerSettings& settings, const std::string& key, const std::string& value);

// The value parsers of apply_setting, for other string-keyed settings (the C API's zero.*):
// std::invalid_argument naming `key` and what is valid. A finite decimal number (no blanks, no
// hexadecimal); a whole number in [least, most]; true/false (or 1/0).
double parse_setting_number(const std::string& key, const std::string& value);
int parse_setting_integer(const std::string& key, const std::string& value, int least, int most);
bool parse_setting_bool(const std::string& key, const std::string& value);

}  // namespace orthojit::runtime
