// Presets and settings (see optimizer_settings.h).
#include "runtime/muon/optimizer_settings.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "runtime/muon/presets.h"

namespace orthojit::runtime {

const char* to_string(MomentumKind kind) { return kind == MomentumKind::Ema ? "ema" : "sum"; }

const char* to_string(LrAdjust adjust) {
  switch (adjust) {
    case LrAdjust::None: return "none";
    case LrAdjust::Original: return "original";
    case LrAdjust::MatchRmsAdamW: return "match_rms_adamw";
    case LrAdjust::Spectral: return "spectral";
  }
  return "?";
}

const char* to_string(AdamFormula formula) { return formula == AdamFormula::Standard ? "standard" : "moonlight"; }

std::optional<MomentumKind> parse_momentum_kind(const std::string& text) {
  if (text == "ema" || text == "lerp") return MomentumKind::Ema;
  if (text == "sum") return MomentumKind::Sum;
  return std::nullopt;
}

std::optional<LrAdjust> parse_lr_adjust(const std::string& text) {
  if (text == "none") return LrAdjust::None;
  if (text == "original") return LrAdjust::Original;
  if (text == "match_rms_adamw") return LrAdjust::MatchRmsAdamW;
  if (text == "spectral") return LrAdjust::Spectral;
  return std::nullopt;
}

std::optional<AdamFormula> parse_adam_formula(const std::string& text) {
  if (text == "standard") return AdamFormula::Standard;
  if (text == "moonlight") return AdamFormula::Moonlight;
  return std::nullopt;
}

const char* to_string(MissingGradient policy) { return policy == MissingGradient::Skip ? "skip" : "zero"; }

std::optional<MissingGradient> parse_missing_gradient(const std::string& text) {
  if (text == "skip") return MissingGradient::Skip;
  if (text == "zero" || text == "zeros") return MissingGradient::Zero;
  return std::nullopt;
}

const char* to_string(MuonVariant variant) {
  switch (variant) {
    case MuonVariant::Muon: return "muon";
    case MuonVariant::NorMuon: return "normuon";
    case MuonVariant::AdaMuon: return "adamuon";
  }
  return "?";
}

std::optional<MuonVariant> parse_muon_variant(const std::string& text) {
  if (text == "muon") return MuonVariant::Muon;
  if (text == "normuon") return MuonVariant::NorMuon;
  if (text == "adamuon") return MuonVariant::AdaMuon;
  return std::nullopt;
}

double momentum_conversion_factor(MomentumKind from, MomentumKind to, double beta) {
  if (from == to) return 1.0;
  return from == MomentumKind::Sum ? 1.0 - beta : 1.0 / (1.0 - beta);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const MuonPreset& preset : muon_presets()) names.emplace_back(preset.name);  // the one list (presets.h)
  return names;
}

OptimizerSettings preset_settings(const std::string& name) {
  OptimizerSettings settings;
  settings.preset = name;
  MuonGroupSettings& muon = settings.muon;
  AdamGroupSettings& adam = settings.adam;
  if (name == "deepspeed") {
    // deepspeed/runtime/zero/muon (original_muon.py muon_update, muon_optimizer.py): EMA momentum,
    // Nesterov by lerp, ns_method "gram" by default (zeropower_via_gram_newtonschulz: f16, restart
    // after step 2; a square matrix runs the standard iteration on the same f16 values), 3-D+
    // tensors as batches of their trailing matrices, a missing gradient taken as zeros.
    muon.lr = 0.02;
    muon.momentum = 0.95;
    muon.weight_decay = 0;
    muon.momentum_kind = MomentumKind::Ema;
    muon.lr_adjust = LrAdjust::Original;
    muon.strategy = "gram";
    muon.precision = ScalarType::F16;
    muon.gram_restarts = std::vector<int>{2};
    muon.square_uses_standard = true;
    muon.square_precision.reset();  // f16, like the gram iteration it replaces
    adam = {3e-4, 0.9, 0.95, 1e-10, 0.0, AdamFormula::Standard};
    settings.tensor_layout = MatrixLayout::Trailing;
    settings.conv_scale = ConvScale::Kernel;
    settings.missing_gradient = MissingGradient::Zero;
    settings.tagging = TaggingRule::DeepSpeed;
  } else if (name == "keller") {
    // KellerJordan/Muon muon.py (current): EMA momentum buf.lerp_(g, 1−β), Nesterov
    // g.lerp_(buf, β) (the sum form buf ← μ·buf + g of 2024 is muon.momentum_kind = sum), bf16
    // jordan NS, 3-D+ tensors as batches of trailing matrices, a missing gradient taken as zeros.
    muon.lr = 0.02;
    muon.momentum = 0.95;
    muon.weight_decay = 0;
    muon.momentum_kind = MomentumKind::Ema;
    muon.lr_adjust = LrAdjust::Original;
    muon.strategy = "standard";
    muon.precision = ScalarType::BF16;
    adam = {3e-4, 0.9, 0.95, 1e-10, 0.0, AdamFormula::Standard};
    settings.tensor_layout = MatrixLayout::Trailing;
    settings.conv_scale = ConvScale::Kernel;
    settings.missing_gradient = MissingGradient::Zero;
    settings.tagging = TaggingRule::DeepSpeed;
  } else if (name == "moonlight") {
    // Moonshot's Muon: summed momentum, lr · 0.2·sqrt(max(A, B)), one lr and wd for both groups,
    // AdamW with eps outside the bias correction.
    muon.lr = 1e-3;
    muon.momentum = 0.95;
    muon.weight_decay = 0.1;
    muon.momentum_kind = MomentumKind::Sum;
    muon.lr_adjust = LrAdjust::MatchRmsAdamW;
    muon.strategy = "standard";
    muon.precision = ScalarType::BF16;
    adam = {1e-3, 0.95, 0.95, 1e-8, 0.1, AdamFormula::Moonlight};
    // Tagging by name, case-sensitive ("embed_tokens", "lm_head"); a missing gradient is skipped;
    // Moonlight asserts 2-D Muon parameters: a 3-D+ one is flattened as its step body would.
    settings.tensor_layout = MatrixLayout::Flatten;
    settings.missing_gradient = MissingGradient::Skip;
    settings.tagging = TaggingRule::Moonlight;
  } else if (name == "torch") {
    // torch.optim.Muon (PyTorch >= 2.9): EMA, Nesterov, norm clamped at eps = 1e-7; the AdamW
    // group takes torch.optim.AdamW's defaults.
    muon.lr = 1e-3;
    muon.momentum = 0.95;
    muon.weight_decay = 0.1;
    muon.momentum_kind = MomentumKind::Ema;
    muon.lr_adjust = LrAdjust::Original;
    muon.strategy = "standard";
    muon.precision = ScalarType::BF16;
    muon.ns_eps = 1e-7;
    muon.norm_clamp = true;
    adam = {1e-3, 0.9, 0.999, 1e-8, 0.01, AdamFormula::Standard};
    // A parameter without a gradient is skipped. torch.optim.Muon refuses non-2-D parameters;
    // orthojit flattens them (a departure) and tags by DeepSpeed's rule (torch has no tagging).
    settings.tensor_layout = MatrixLayout::Flatten;
    settings.missing_gradient = MissingGradient::Skip;
    settings.tagging = TaggingRule::DeepSpeed;
  } else {
    std::string names;
    for (const auto& preset : preset_names()) names += (names.empty() ? "" : ", ") + preset;
    throw std::invalid_argument("unknown optimizer preset '" + name + "'; presets: " + names);
  }
  return settings;
}

std::string describe(const OptimizerSettings& settings) {
  const MuonGroupSettings& m = settings.muon;
  const AdamGroupSettings& a = settings.adam;
  // Every line is a key apply_setting takes, with a value it takes back (a setting left to the
  // program or to its default says so in parentheses, and is not set by passing that text).
  auto optional = [](const std::optional<double>& value, const char* otherwise) {
    std::ostringstream text;
    if (value) text << *value;
    else text << otherwise;
    return text.str();
  };
  std::ostringstream out;
  out << "preset = " << settings.preset << "\n"
      << "muon.lr = " << m.lr << "\nmuon.momentum = " << m.momentum << "\nmuon.nesterov = " << (m.nesterov ? "true" : "false")
      << "\nmuon.weight_decay = " << m.weight_decay << "\nmuon.momentum_kind = " << to_string(m.momentum_kind) << "\nmuon.lr_adjust = " << to_string(m.lr_adjust)
      << "\nmuon.program = " << m.program << "\nmuon.strategy = " << m.strategy
      << "\nmuon.precision = " << (m.precision ? to_string(*m.precision) : "(the program's)")
      << "\nmuon.ns_steps = " << (m.ns_steps ? std::to_string(*m.ns_steps) : "(the program's)")
      << "\nmuon.ns_eps = " << optional(m.ns_eps, "(the program's)")
      << "\nmuon.norm_clamp = " << (m.norm_clamp ? "true" : "false") << "  # " << (m.norm_clamp ? "X / max(|X|, eps)" : "X / (|X| + eps)")
      << "\nmuon.backend = " << m.backend << "\nmuon.threads = " << m.threads << (m.threads == 0 ? "  # every core" : "")
      << "\nmuon.variant = " << to_string(m.variant) << "\nmuon.beta2 = " << optional(m.variant_beta2, "(the variant's default)")
      << "\nmuon.variant_eps = " << optional(m.variant_eps, "(the variant's default)")
      << "\nmuon.sign_momentum = " << (m.sign_momentum ? "true" : "false") << "\nadam.lr = " << a.lr << "\nadam.beta1 = " << a.beta1
      << "\nadam.beta2 = " << a.beta2 << "\nadam.eps = " << a.eps << "\nadam.weight_decay = " << a.weight_decay
      << "\nadam.formula = " << to_string(a.formula) << "\ntensor_layout = " << to_string(settings.tensor_layout)
      << "\nconv_scale = " << to_string(settings.conv_scale) << "\nmissing_grad = " << to_string(settings.missing_gradient)
      << "\ntagging = " << to_string(settings.tagging) << "\n";
  return out.str();
}

// A decimal number: strtod alone would also take leading blanks and hexadecimal ("0x10" = 16).
double parse_setting_number(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  const bool decimal = !value.empty() && !std::isspace(static_cast<unsigned char>(value[0])) && value.find_first_of("xX") == std::string::npos;
  if (!decimal || *end != '\0' || !std::isfinite(number)) throw std::invalid_argument(key + ": '" + value + "' is not a finite number (write it in decimal, e.g. 0.02 or 2e-2)");
  return number;
}

// A whole number in [least, most].
int parse_setting_integer(const std::string& key, const std::string& value, int least, int most) {
  const double number = parse_setting_number(key, value);
  if (number != std::floor(number) || number < least || number > most)
    throw std::invalid_argument(key + " must be an integer in " + std::to_string(least) + ".." + std::to_string(most) + " (got " + value + ")");
  return static_cast<int>(number);
}

bool parse_setting_bool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  throw std::invalid_argument(key + ": '" + value + "' is not true or false");
}

namespace {

double parse_non_negative(const std::string& key, const std::string& value) {
  const double number = parse_setting_number(key, value);
  if (number < 0) throw std::invalid_argument(key + " must be >= 0 (got " + value + ")");
  return number;
}

double parse_unit_interval(const std::string& key, const std::string& value) {
  const double number = parse_setting_number(key, value);
  if (number < 0 || number >= 1) throw std::invalid_argument(key + " must be in [0, 1) (got " + value + ")");
  return number;
}

}  // namespace

namespace {

// apply_setting's body: may have changed `settings` when it throws.
void apply_setting_unchecked(OptimizerSettings& settings, const std::string& key, const std::string& value) {
  MuonGroupSettings& m = settings.muon;
  AdamGroupSettings& a = settings.adam;
  if (key == "muon.lr") m.lr = parse_non_negative(key, value);
  else if (key == "muon.momentum") m.momentum = parse_unit_interval(key, value);
  else if (key == "muon.nesterov") m.nesterov = parse_setting_bool(key, value);
  else if (key == "muon.weight_decay") m.weight_decay = parse_non_negative(key, value);
  else if (key == "muon.momentum_kind") {
    auto kind = parse_momentum_kind(value);
    if (!kind) throw std::invalid_argument(key + ": '" + value + "' is not ema or sum");
    m.momentum_kind = *kind;
  } else if (key == "muon.lr_adjust") {
    auto adjust = parse_lr_adjust(value);
    if (!adjust) throw std::invalid_argument(key + ": '" + value + "' is not none, original, match_rms_adamw or spectral");
    m.lr_adjust = *adjust;
  } else if (key == "muon.program") {
    if (value.empty()) throw std::invalid_argument(key + ": empty program name");
    m.program = value;
  } else if (key == "muon.strategy") {
    if (value != "standard" && value != "gram" && value != "auto") throw std::invalid_argument(key + ": '" + value + "' is not standard, gram or auto");
    m.strategy = value;
  } else if (key == "muon.precision") {
    auto type = parse_scalar_type(value);
    if (!type || *type == ScalarType::F64) throw std::invalid_argument(key + ": '" + value + "' is not bf16, f16 or f32");
    m.precision = *type;
  } else if (key == "muon.ns_steps") m.ns_steps = parse_setting_integer(key, value, 1, 100); else if (key == "muon.ns_eps") {
    const double eps = parse_setting_number(key, value);
    if (eps <= 0) throw std::invalid_argument(key + " must be > 0 (got " + value + ")");
    m.ns_eps = eps;
  } else if (key == "muon.norm_clamp") m.norm_clamp = parse_setting_bool(key, value);
  else if (key == "muon.backend") {
    if (value != "auto" && value != "ref" && value != "cpu" && value != "cuda")
      throw std::invalid_argument(key + ": '" + value + "' is not auto, ref, cpu or cuda");
    m.backend = value;
  } else if (key == "muon.threads") m.threads = parse_setting_integer(key, value, 0, kMaxMuonThreads);  // 0: every core
  else if (key == "muon.variant") {
    auto variant = parse_muon_variant(value);
    if (!variant) throw std::invalid_argument(key + ": '" + value + "' is not muon, normuon or adamuon");
    m.variant = *variant;
  } else if (key == "muon.beta2") m.variant_beta2 = parse_unit_interval(key, value);
  else if (key == "muon.variant_eps") {
    const double eps = parse_setting_number(key, value);
    if (eps <= 0) throw std::invalid_argument(key + " must be > 0 (got " + value + ")");
    m.variant_eps = eps;
  } else if (key == "muon.sign_momentum") m.sign_momentum = parse_setting_bool(key, value);
  else if (key == "adam.lr") a.lr = parse_non_negative(key, value);
  else if (key == "adam.beta1") a.beta1 = parse_unit_interval(key, value);
  else if (key == "adam.beta2") a.beta2 = parse_unit_interval(key, value);
  else if (key == "adam.eps") {
    const double eps = parse_setting_number(key, value);
    if (eps <= 0) throw std::invalid_argument(key + " must be > 0 (got " + value + ")");
    a.eps = eps;
  } else if (key == "adam.weight_decay") a.weight_decay = parse_non_negative(key, value);
  else if (key == "adam.formula") {
    auto formula = parse_adam_formula(value);
    if (!formula) throw std::invalid_argument(key + ": '" + value + "' is not standard or moonlight");
    a.formula = *formula;
  } else if (key == "experts_as_batch") settings.tensor_layout = parse_setting_bool(key, value) ? MatrixLayout::Batch : MatrixLayout::Flatten;
  else if (key == "tensor_layout") {
    auto layout = parse_matrix_layout(value);
    if (!layout || *layout == MatrixLayout::Auto) throw std::invalid_argument(key + ": '" + value + "' is not flatten, batch or trailing");
    settings.tensor_layout = *layout;
  } else if (key == "conv_scale") {
    auto scale = parse_conv_scale(value);
    if (!scale) throw std::invalid_argument(key + ": '" + value + "' is not kernel or matrix");
    settings.conv_scale = *scale;
  } else if (key == "missing_grad") {
    auto policy = parse_missing_gradient(value);
    if (!policy) throw std::invalid_argument(key + ": '" + value + "' is not skip or zero");
    settings.missing_gradient = *policy;
  } else if (key == "tagging") {
    auto rule = parse_tagging_rule(value);
    if (!rule) throw std::invalid_argument(key + ": '" + value + "' is not deepspeed or moonlight");
    settings.tagging = *rule;
  } else
    throw std::invalid_argument("unknown optimizer setting '" + key +
                                "'; settings: muon.lr, muon.momentum, muon.nesterov, muon.weight_decay, muon.momentum_kind, muon.lr_adjust, muon.program, "
                                "muon.strategy, muon.precision, muon.ns_steps, muon.ns_eps, muon.norm_clamp, muon.backend, muon.threads, muon.variant, "
                                "muon.beta2, muon.variant_eps, muon.sign_momentum, adam.lr, "
                                "adam.beta1, adam.beta2, adam.eps, adam.weight_decay, adam.formula, tensor_layout, conv_scale, missing_grad, tagging, "
                                "experts_as_batch");
}

}  // namespace

void apply_setting(OptimizerSettings& settings, const std::string& key, const std::string& value) {
  // On a copy: a refused value leaves every setting as it was (a branch that assigned before its
  // check once left adam.eps = 0 behind its error, and the next step wrote NaN).
  OptimizerSettings changed = settings;
  apply_setting_unchecked(changed, key, value);
  settings = std::move(changed);
}

}  // namespace orthojit::runtime
