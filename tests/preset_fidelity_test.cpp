// Each preset against a float64 re-implementation of the system it names, written from that
// system's own source and independent of orthojit's settings (every rule below is spelled out,
// none is read from OptimizerSettings):
//   DeepSpeed  deepspeed/runtime/zero/muon/original_muon.py (muon_update, adam_update,
//              SingleDeviceMuonWithAuxAdam) and muon_optimizer.py; tagging from
//              set_optimizer_flags (ndim >= 2, lower-cased name without "embed" / "lm_head")
//   Keller     KellerJordan/Muon muon.py (current: EMA momentum; SingleDeviceMuonWithAuxAdam)
//   Moonlight  MoonshotAI/Moonlight examples/toy_train.py (Muon, get_optimizer's tagging), with
//              AdamW betas (0.95, 0.95) as in the Moonlight code orthojit started from
// on one model with every kind of tensor those systems meet: wide, tall and square matrices, a
// 3-D expert stack, 4-D conv filters (one whose kernel-dims scale differs from its matrix's), a
// 5-D tensor, embeddings, lm_head, 1-D norms, parameters whose gradient is missing on a step,
// and one whose gradients are so small that the Newton–Schulz eps dominates (where the sum and
// EMA momentum forms give different parameters, not only different buffers).
//
// orthojit runs Newton–Schulz exactly (reference backend, f64 storage; gram and standard agree
// in exact arithmetic), so only its documented f32 rounding of state, NS input and output and
// parameters remains, which the re-implementations repeat. Tolerance: 2e-6 relative to the
// largest magnitude (a few f32 ulps over three steps); the negative controls at the end show that
// the comparison sees each of the behaviours this replaced by orders of magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/muon/state_format.h"
#include "runtime/muon/update_rules.h"
#include "runtime/orthogonalize.h"
#include "tests/f64_newton_schulz.h"

namespace orthojit::runtime {
namespace {

using Vector = std::vector<double>;
const std::vector<std::array<double, 3>> kJordan5(5, {3.4445, -4.7750, 2.0315});

double f32(double value) { return static_cast<double>(static_cast<float>(value)); }

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct TensorSpec {
  TensorSpec(std::string n, std::vector<int64_t> s, std::vector<int> missing = {}, double scale = 1.0)
      : name(std::move(n)), shape(std::move(s)), missing_on(std::move(missing)), grad_scale(scale) {}
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int> missing_on;  // steps (0-based) without a gradient
  double grad_scale = 1.0;
};

// One model for DeepSpeed and Keller (every tensor rank), one 2-D-only for Moonlight (it asserts
// p.ndim == 2 for Muon parameters).
std::vector<TensorSpec> deepspeed_model() {
  return {{"layers.0.attn.q.weight", {24, 40}},
          {"layers.0.mlp.down.weight", {40, 24}},
          {"layers.0.attn.o.weight", {16, 16}},
          {"layers.1.attn.k.weight", {16, 32}, {1}},
          {"moe.experts.w1", {4, 12, 8}},
          {"conv1.weight", {32, 8, 1, 1}},  // kernel dims 1x1: scale 1; its (32, 8) matrix: 2
          {"conv2.weight", {6, 4, 3, 2}},   // kernel dims 3x2: scale sqrt(1.5); its (6, 24) matrix: 1
          {"stack.weight", {2, 2, 6, 4, 5}},
          {"layers.2.tiny.weight", {12, 16}, {}, 1e-10},
          {"model.embed_tokens.weight", {50, 16}},
          {"embed.proj.weight", {16, 24}},
          {"lm_head.weight", {50, 16}},
          {"layers.0.norm.weight", {16}, {1}},
          {"layers.0.mlp.bias", {40}}};
}

std::vector<TensorSpec> moonlight_model() {
  return {{"layers.0.attn.q.weight", {24, 40}},
          {"layers.0.mlp.down.weight", {40, 24}},
          {"layers.0.attn.o.weight", {16, 16}},
          {"layers.1.attn.k.weight", {16, 32}, {1}},
          {"layers.2.tiny.weight", {12, 16}, {}, 1e-10},
          {"model.embed_tokens.weight", {50, 16}},
          {"embed.weight", {16, 24}},        // Moonlight: Muon ("embed_tokens" is what it looks for)
          {"Decoder.LM_Head.weight", {8, 16}},  // case-sensitive: Muon there, AdamW under DeepSpeed's rule
          {"lm_head.weight", {50, 16}},
          {"layers.0.norm.weight", {16}, {1}}};
}

struct Trajectory {
  std::vector<std::vector<float>> initial;
  std::vector<std::vector<std::optional<std::vector<float>>>> grads;  // [step][tensor]
};

Trajectory make_trajectory(const std::vector<TensorSpec>& model, int steps, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Trajectory t;
  for (const TensorSpec& spec : model) {
    std::vector<float> values(static_cast<size_t>(numel(spec.shape)));
    for (float& v : values) v = static_cast<float>(normal(random));
    t.initial.push_back(values);
  }
  for (int step = 0; step < steps; ++step) {
    std::vector<std::optional<std::vector<float>>> grads;
    for (const TensorSpec& spec : model) {
      if (std::count(spec.missing_on.begin(), spec.missing_on.end(), step)) {
        grads.push_back(std::nullopt);
        continue;
      }
      std::vector<float> g(static_cast<size_t>(numel(spec.shape)));
      for (float& v : g) v = static_cast<float>(normal(random) * spec.grad_scale);
      grads.push_back(g);
    }
    t.grads.push_back(grads);
  }
  return t;
}

// -------------------------------------------------------------------------------- the systems

struct SystemState {
  std::vector<Vector> momentum, exp_avg, exp_avg_sq;
  std::vector<int> step;
};

struct SystemResult {
  std::vector<std::vector<float>> params;
  std::vector<Vector> momentum;  // empty for AdamW tensors
};

// AdamW as adam_update + the group loop of DeepSpeed's / Keller's MuonWithAuxAdam.
void keller_adam(std::vector<float>& p, const Vector& g, Vector& m, Vector& v, int step) {
  const double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-10, wd = 0;
  const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
  for (size_t i = 0; i < p.size(); ++i) {
    m[i] = f32(m[i] + (1 - beta1) * (g[i] - m[i]));           // buf1.lerp_(grad, 1 - betas[0])
    v[i] = f32(v[i] + (1 - beta2) * (g[i] * g[i] - v[i]));    // buf2.lerp_(grad.square(), 1 - betas[1])
    const double update = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
    p[i] = static_cast<float>(p[i] * (1 - lr * wd) - lr * update);
  }
}

// muon_update of DeepSpeed (original_muon.py, not an expert group) and Keller (muon.py): EMA
// momentum, Nesterov by lerp; a 4-D update viewed as (len, -1); NS batched over the leading
// dims of whatever remains; scale max(1, grad.size(-2) / grad.size(-1))**0.5 of the gradient's
// own shape.
void keller_muon(std::vector<float>& p, const std::vector<int64_t>& shape, const Vector& g, Vector& momentum) {
  const double lr = 0.02, beta = 0.95, wd = 0;
  const size_t n = p.size();
  Vector update(n);
  for (size_t i = 0; i < n; ++i) {
    momentum[i] = f32(momentum[i] + (1 - beta) * (g[i] - momentum[i]));  // momentum.lerp_(grad, 1 - beta)
    update[i] = f32(g[i] + beta * (momentum[i] - g[i]));                // grad.lerp_(momentum, beta)
  }
  int64_t batch = 1, rows = 0, cols = 0;
  if (shape.size() == 4) {
    rows = shape[0];
    cols = shape[1] * shape[2] * shape[3];
  } else {
    for (size_t d = 0; d + 2 < shape.size(); ++d) batch *= shape[d];
    rows = shape[shape.size() - 2];
    cols = shape[shape.size() - 1];
  }
  Vector orthogonal(n);
  const int64_t each = rows * cols;
  for (int64_t b = 0; b < batch; ++b) {
    const Vector block(update.begin() + b * each, update.begin() + (b + 1) * each);
    const Vector o = testing::newton_schulz(block, rows, cols, kJordan5, 1e-7, false);
    for (int64_t i = 0; i < each; ++i) orthogonal[static_cast<size_t>(b * each + i)] = f32(o[static_cast<size_t>(i)]);
  }
  const double scale = std::sqrt(std::max(1.0, static_cast<double>(shape[shape.size() - 2]) / static_cast<double>(shape[shape.size() - 1])));
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i] * (1 - lr * wd) - lr * scale * orthogonal[i]);
}

bool deepspeed_tag(const std::string& name, const std::vector<int64_t>& shape) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return shape.size() >= 2 && lower.find("embed") == std::string::npos && lower.find("lm_head") == std::string::npos;
}

// DeepSpeed and Keller: p.grad None -> zeros and the full step (both groups).
SystemResult run_keller_family(const std::vector<TensorSpec>& model, const Trajectory& t) {
  SystemResult r;
  r.params = t.initial;
  SystemState s;
  for (const TensorSpec& spec : model) {
    const size_t n = static_cast<size_t>(numel(spec.shape));
    s.momentum.emplace_back(n, 0.0), s.exp_avg.emplace_back(n, 0.0), s.exp_avg_sq.emplace_back(n, 0.0), s.step.push_back(0);
  }
  for (const auto& grads : t.grads)
    for (size_t i = 0; i < model.size(); ++i) {
      const Vector g = grads[i] ? Vector(grads[i]->begin(), grads[i]->end()) : Vector(r.params[i].size(), 0.0);
      if (deepspeed_tag(model[i].name, model[i].shape)) keller_muon(r.params[i], model[i].shape, g, s.momentum[i]);
      else keller_adam(r.params[i], g, s.exp_avg[i], s.exp_avg_sq[i], ++s.step[i]);
    }
  for (size_t i = 0; i < model.size(); ++i) r.momentum.push_back(deepspeed_tag(model[i].name, model[i].shape) ? s.momentum[i] : Vector());
  return r;
}

// Moonlight's Muon (toy_train.py): tagging by name, case-sensitive; summed momentum; lr adjusted
// by 0.2·sqrt(max(A, B)); weight decay with the unadjusted lr; its AdamW with eps outside the
// bias correction; p.grad None skipped in both groups.
bool moonlight_tag(const std::string& name, const std::vector<int64_t>& shape) {
  return shape.size() >= 2 && name.find("embed_tokens") == std::string::npos && name.find("lm_head") == std::string::npos;
}

SystemResult run_moonlight(const std::vector<TensorSpec>& model, const Trajectory& t) {
  const double lr = 1e-3, wd = 0.1, beta = 0.95, beta1 = 0.95, beta2 = 0.95, eps = 1e-8;
  SystemResult r;
  r.params = t.initial;
  SystemState s;
  for (const TensorSpec& spec : model) {
    const size_t n = static_cast<size_t>(numel(spec.shape));
    s.momentum.emplace_back(n, 0.0), s.exp_avg.emplace_back(n, 0.0), s.exp_avg_sq.emplace_back(n, 0.0), s.step.push_back(0);
  }
  for (const auto& grads : t.grads)
    for (size_t i = 0; i < model.size(); ++i) {
      if (!grads[i]) continue;
      const Vector g(grads[i]->begin(), grads[i]->end());
      std::vector<float>& p = r.params[i];
      if (moonlight_tag(model[i].name, model[i].shape)) {
        const int64_t rows = model[i].shape[0], cols = model[i].shape[1];
        Vector u(p.size());
        for (size_t k = 0; k < p.size(); ++k) {
          s.momentum[i][k] = f32(beta * s.momentum[i][k] + g[k]);  // buf.mul_(momentum).add_(g)
          u[k] = f32(g[k] + beta * s.momentum[i][k]);              // g.add(buf, alpha=momentum)
        }
        const Vector o = testing::newton_schulz(u, rows, cols, kJordan5, 1e-7, false);
        const double adjusted = lr * 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
        for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<float>(p[k] * (1 - lr * wd) - adjusted * f32(o[k]));
      } else {
        const int step = ++s.step[i];
        const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step), scale = bc1 / std::sqrt(bc2);
        for (size_t k = 0; k < p.size(); ++k) {
          s.exp_avg[i][k] = f32(s.exp_avg[i][k] + (1 - beta1) * (g[k] - s.exp_avg[i][k]));
          s.exp_avg_sq[i][k] = f32(s.exp_avg_sq[i][k] + (1 - beta2) * (g[k] * g[k] - s.exp_avg_sq[i][k]));
          const double direction = s.exp_avg[i][k] / (eps + std::sqrt(s.exp_avg_sq[i][k]));
          p[k] = static_cast<float>(p[k] * (1 - lr * wd) - (lr / scale) * direction);
        }
      }
    }
  for (size_t i = 0; i < model.size(); ++i) r.momentum.push_back(moonlight_tag(model[i].name, model[i].shape) ? s.momentum[i] : Vector());
  return r;
}

// -------------------------------------------------------------------------------- orthojit

SystemResult run_orthojit(const std::vector<TensorSpec>& model, const Trajectory& t, const std::string& preset,
                          const std::function<void(OptimizerSettings&)>& tweak = nullptr) {
  OptimizerSettings settings = preset_settings(preset);
  settings.muon.backend = "ref";
  settings.muon.precision = ScalarType::F64;  // the exact iteration
  if (tweak) tweak(settings);
  SystemResult r;
  r.params = t.initial;
  std::vector<std::vector<float>> grad_buffers;
  for (const TensorSpec& spec : model) grad_buffers.emplace_back(static_cast<size_t>(numel(spec.shape)), 0.0f);
  std::vector<Parameter> parameters;
  for (size_t i = 0; i < model.size(); ++i) {
    Parameter p;
    p.name = model[i].name;
    p.shape = model[i].shape;
    p.data = r.params[i].data();
    p.grad = grad_buffers[i].data();
    parameters.push_back(p);
  }
  HybridOptimizer optimizer(parameters, settings);
  for (const auto& grads : t.grads) {
    for (size_t i = 0; i < model.size(); ++i) {
      if (grads[i]) std::copy(grads[i]->begin(), grads[i]->end(), grad_buffers[i].begin());
      optimizer.set_gradient(model[i].name, grads[i] ? grad_buffers[i].data() : nullptr, DType::F32);
    }
    const StepReport report = optimizer.step();
    EXPECT_FALSE(report.skipped) << report.reason;
  }
  for (const TensorSpec& spec : model) {
    const auto& state = optimizer.state().at(spec.name);
    r.momentum.push_back(Vector(state.momentum.begin(), state.momentum.end()));
  }
  return r;
}

// The largest |actual − expected| over the tensor, relative to the largest expected magnitude
// (elementwise: one wrong element anywhere shows).
template <class T>
double worst_error(const std::vector<T>& actual, const std::vector<T>& expected) {
  double largest = 1e-30, worst = 0;
  for (T v : expected) largest = std::max(largest, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < actual.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(actual[i]) - static_cast<double>(expected[i])));
  return worst / largest;
}

constexpr double kTolerance = 2e-6;

// The worst parameter or momentum error over the model, and which tensor it is in.
std::pair<double, std::string> compare(const std::vector<TensorSpec>& model, const SystemResult& actual, const SystemResult& expected) {
  std::pair<double, std::string> worst{0.0, ""};
  for (size_t i = 0; i < model.size(); ++i) {
    const double p = worst_error(actual.params[i], expected.params[i]);
    if (p > worst.first) worst = {p, model[i].name + " (parameter)"};
    if (!expected.momentum[i].empty()) {
      if (actual.momentum[i].size() != expected.momentum[i].size()) return {1e30, model[i].name + " (no momentum: tagged AdamW)"};
      const double m = worst_error(actual.momentum[i], expected.momentum[i]);
      if (m > worst.first) worst = {m, model[i].name + " (momentum_buffer)"};
    } else if (!actual.momentum[i].empty()) {
      return {1e30, model[i].name + " (has momentum: tagged Muon)"};
    }
  }
  return worst;
}

TEST(PresetFidelity, DeepSpeedMatchesOriginalMuon) {
  const auto model = deepspeed_model();
  const Trajectory t = make_trajectory(model, 3, 11);
  const auto [error, where] = compare(model, run_orthojit(model, t, "deepspeed"), run_keller_family(model, t));
  EXPECT_LT(error, kTolerance) << where;
  std::printf("worst relative difference %.3g (%s)\n", error, where.c_str());
}

TEST(PresetFidelity, KellerMatchesKellerJordanMuon) {
  const auto model = deepspeed_model();
  const Trajectory t = make_trajectory(model, 3, 12);
  const auto [error, where] = compare(model, run_orthojit(model, t, "keller"), run_keller_family(model, t));
  EXPECT_LT(error, kTolerance) << where;
  std::printf("worst relative difference %.3g (%s)\n", error, where.c_str());
}

TEST(PresetFidelity, MoonlightMatchesToyTrain) {
  const auto model = moonlight_model();
  const Trajectory t = make_trajectory(model, 3, 13);
  const auto [error, where] = compare(model, run_orthojit(model, t, "moonlight"), run_moonlight(model, t));
  EXPECT_LT(error, kTolerance) << where;
  std::printf("worst relative difference %.3g (%s)\n", error, where.c_str());
}

// The negative controls: each behaviour this issue replaced, set back by its setting, is seen by
// the same comparison far above the tolerance (so the tests above can fail).
TEST(PresetFidelity, TheComparisonSeesEachReplacedBehaviour) {
  const auto model = deepspeed_model();
  const Trajectory t = make_trajectory(model, 3, 14);
  const SystemResult keller = run_keller_family(model, t);
  const std::map<std::string, std::function<void(OptimizerSettings&)>> old_behaviours = {
      {"3-D+ flattened", [](OptimizerSettings& s) { s.tensor_layout = MatrixLayout::Flatten; }},
      {"4-D scale from the matrix", [](OptimizerSettings& s) { s.conv_scale = ConvScale::Matrix; }},
      {"missing gradient skipped", [](OptimizerSettings& s) { s.missing_gradient = MissingGradient::Skip; }},
      {"sum momentum", [](OptimizerSettings& s) { s.muon.momentum_kind = MomentumKind::Sum; }},
  };
  for (const auto& [what, tweak] : old_behaviours) {
    const auto [error, where] = compare(model, run_orthojit(model, t, "keller", tweak), keller);
    EXPECT_GT(error, 100 * kTolerance) << what << ": not seen (worst " << error << " at " << where << ")";
    std::printf("%s: worst relative difference %.3g (%s)\n", what.c_str(), error, where.c_str());
  }
  const auto moon = moonlight_model();
  const Trajectory tm = make_trajectory(moon, 3, 15);
  const auto [error, where] = compare(moon, run_orthojit(moon, tm, "moonlight", [](OptimizerSettings& s) { s.tagging = TaggingRule::DeepSpeed; }),
                                      run_moonlight(moon, tm));
  EXPECT_GT(error, 100 * kTolerance) << "DeepSpeed's tagging under moonlight: not seen (" << where << ")";
}

// Sum-form momentum only: under the default regime the parameters agree with the EMA form
// (NS normalizes the factor 1 − β away) while the buffers differ by 1/(1 − β) — the reason a
// checkpoint does not interchange — and with gradients below the NS eps they differ.
TEST(PresetFidelity, SumAndEmaMomentumAgreeOnlyWhenTheNormDominatesEps) {
  const std::vector<TensorSpec> normal = {{"w", {12, 16}}}, tiny = {{"w", {12, 16}, {}, 1e-10}};
  for (const auto* model : {&normal, &tiny}) {
    const Trajectory t = make_trajectory(*model, 3, 16);
    const SystemResult ema = run_orthojit(*model, t, "keller");
    const SystemResult sum = run_orthojit(*model, t, "keller", [](OptimizerSettings& s) { s.muon.momentum_kind = MomentumKind::Sum; });
    // M_t = (1 − β)·B_t: a few f32 roundings apart.
    Vector scaled(sum.momentum[0].size());
    for (size_t i = 0; i < scaled.size(); ++i) scaled[i] = 0.05 * sum.momentum[0][i];
    EXPECT_LT(worst_error(scaled, ema.momentum[0]), 1e-6);
    EXPECT_GT(worst_error(sum.momentum[0], ema.momentum[0]), 10.0);  // 1/(1 − β) − 1 = 19
    // The parameters' changes: equal up to f32 rounding of p when ‖U‖ ≫ eps, different below it.
    std::vector<float> ema_delta(t.initial[0].size()), sum_delta(ema_delta.size());
    for (size_t i = 0; i < ema_delta.size(); ++i) {
      ema_delta[i] = ema.params[0][i] - t.initial[0][i];
      sum_delta[i] = sum.params[0][i] - t.initial[0][i];
    }
    const double parameters = worst_error(sum_delta, ema_delta);
    if (model == &normal) EXPECT_LT(parameters, 1e-4);
    else EXPECT_GT(parameters, 0.1);
  }
}

// DeepSpeed's gram method on a square matrix runs the standard iteration on the same f16 values
// (zeropower_via_gram_newtonschulz: X = G.to(float16) before the `m <= n` branch).
TEST(PresetFidelity, DeepSpeedSquareMatricesRunStandardInF16) {
  BlockOrthogonalizer blocks(preset_settings("deepspeed").muon);
  const auto square = blocks.compiled(1, 32, 32);
  EXPECT_EQ(square->strategy(), orthojit::ir::StrategyKind::Standard);
  EXPECT_EQ(square->function().policy.storage, ScalarType::F16);
  const auto wide = blocks.compiled(1, 32, 96);
  EXPECT_EQ(wide->strategy(), orthojit::ir::StrategyKind::Gram);
  EXPECT_EQ(wide->function().policy.storage, ScalarType::F16);
}

TEST(PresetFidelity, MissingGradientAndTaggingArePresetProperties) {
  EXPECT_EQ(preset_settings("deepspeed").missing_gradient, MissingGradient::Zero);
  EXPECT_EQ(preset_settings("keller").missing_gradient, MissingGradient::Zero);
  EXPECT_EQ(preset_settings("moonlight").missing_gradient, MissingGradient::Skip);
  EXPECT_EQ(preset_settings("torch").missing_gradient, MissingGradient::Skip);
  EXPECT_EQ(preset_settings("moonlight").tagging, TaggingRule::Moonlight);
  EXPECT_EQ(preset_settings("deepspeed").tagging, TaggingRule::DeepSpeed);
  EXPECT_EQ(preset_settings("moonlight").adam.beta1, 0.95);
  EXPECT_EQ(preset_settings("moonlight").adam.beta2, 0.95);
  EXPECT_TRUE(default_use_muon("embed.weight", {16, 24}, TaggingRule::Moonlight));
  EXPECT_FALSE(default_use_muon("embed.weight", {16, 24}, TaggingRule::DeepSpeed));
  EXPECT_TRUE(default_use_muon("LM_Head.weight", {16, 24}, TaggingRule::Moonlight));
  EXPECT_FALSE(default_use_muon("LM_Head.weight", {16, 24}, TaggingRule::DeepSpeed));
  EXPECT_FALSE(default_use_muon("model.embed_tokens.weight", {16, 24}, TaggingRule::Moonlight));
  // Settings by key, with errors naming what is valid.
  OptimizerSettings s = preset_settings("torch");
  apply_setting(s, "missing_grad", "zero");
  apply_setting(s, "tagging", "moonlight");
  apply_setting(s, "tensor_layout", "trailing");
  apply_setting(s, "conv_scale", "matrix");
  EXPECT_EQ(s.missing_gradient, MissingGradient::Zero);
  EXPECT_EQ(s.tagging, TaggingRule::Moonlight);
  EXPECT_EQ(s.tensor_layout, MatrixLayout::Trailing);
  EXPECT_EQ(s.conv_scale, ConvScale::Matrix);
  try {
    apply_setting(s, "missing_grad", "ignore");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("is not skip or zero"), std::string::npos) << error.what();
  }
}

TEST(PresetFidelity, TrailingLayoutPlans) {
  Parameter p;
  p.name = "t";
  p.shape = {4, 12, 8};
  MatrixPlan plan = plan_matrices(p, MatrixLayout::Trailing);
  EXPECT_EQ(plan.batch, 4);
  EXPECT_EQ(plan.rows, 12);
  EXPECT_EQ(plan.cols, 8);
  p.shape = {2, 2, 6, 4, 5};
  plan = plan_matrices(p, MatrixLayout::Trailing);
  EXPECT_EQ(plan.batch, 24);
  EXPECT_EQ(plan.rows, 4);
  EXPECT_EQ(plan.cols, 5);
  p.shape = {32, 8, 1, 1};
  plan = plan_matrices(p, MatrixLayout::Trailing);
  EXPECT_EQ(plan.batch, 1);
  EXPECT_EQ(plan.rows, 32);
  EXPECT_EQ(plan.cols, 8);
  EXPECT_EQ(scale_shape(plan, plan.blocks[0]), (std::pair<int64_t, int64_t>{1, 1}));
  plan = plan_matrices(p, MatrixLayout::Trailing, ConvScale::Matrix);
  EXPECT_EQ(scale_shape(plan, plan.blocks[0]), (std::pair<int64_t, int64_t>{32, 8}));
  p.layout = MatrixLayout::Flatten;  // the parameter's own layout wins
  plan = plan_matrices(p, MatrixLayout::Trailing);
  EXPECT_EQ(plan.scale_rows, 0);
}

// A state saved in format 1 by the keller preset holds the 2024 sum-form buffers; the keller preset
// now keeps the EMA. Loading it is refused (nothing changes), converting it gives the buffers the
// EMA form would hold, and format 2 records the form so the check needs no guess.
TEST(PresetFidelity, OldKellerStatesAreRefusedThenConverted) {
  const std::string dir = ::testing::TempDir();
  const std::string old_path = dir + "/orthojit_keller_v1.safetensors", new_path = dir + "/orthojit_keller_v2.safetensors";
  const std::vector<TensorSpec> model = {{"layers.0.w", {6, 10}}, {"layers.0.norm.weight", {6}}};
  const Trajectory t = make_trajectory(model, 2, 21);
  std::vector<float> w = t.initial[0], b = t.initial[1], gw = *t.grads[0][0], gb = *t.grads[0][1];
  auto parameters = [&] {
    Parameter pw, pb;
    pw.name = "layers.0.w", pw.shape = {6, 10}, pw.data = w.data(), pw.grad = gw.data();
    pb.name = "layers.0.norm.weight", pb.shape = {6}, pb.data = b.data(), pb.grad = gb.data();
    return std::vector<Parameter>{pw, pb};
  };
  OptimizerSettings sum_settings = preset_settings("keller");
  sum_settings.muon.backend = "ref";
  sum_settings.muon.momentum_kind = MomentumKind::Sum;
  HybridOptimizer old_form(parameters(), sum_settings);
  old_form.step();
  old_form.step();
  old_form.save_state(old_path);
  {  // rewrite as format 1 wrote it: no record of the form
    SafetensorsFile file = read_safetensors(old_path);
    file.metadata["orthojit.format"] = "hybrid-optimizer-state/1";
    file.metadata.erase("orthojit.momentum_kind");
    file.metadata.erase("orthojit.momentum");
    write_safetensors(old_path, file.tensors, file.metadata);
  }
  OptimizerSettings ema_settings = preset_settings("keller");
  ema_settings.muon.backend = "ref";
  HybridOptimizer current(parameters(), ema_settings);
  try {
    current.load_state(old_path);
    ADD_FAILURE() << "a sum-form state loaded into the EMA keller preset";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("sum form"), std::string::npos) << message;
    EXPECT_NE(message.find("nothing was loaded"), std::string::npos) << message;
    EXPECT_NE(message.find("orthojit convert-state"), std::string::npos) << message;
    EXPECT_NE(message.find("muon.momentum_kind = sum"), std::string::npos) << message;
  }
  for (float m : current.state().at("layers.0.w").momentum) EXPECT_EQ(m, 0.0f);  // unchanged
  const ConversionReport report = convert_state_momentum(old_path, new_path, MomentumKind::Ema, 0.95);
  EXPECT_EQ(report.from, MomentumKind::Sum);
  EXPECT_EQ(report.buffers, 1);
  EXPECT_NEAR(report.factor, 0.05, 1e-15);
  current.load_state(new_path);
  const auto& before = old_form.state().at("layers.0.w").momentum;
  const auto& after = current.state().at("layers.0.w").momentum;
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], static_cast<float>(static_cast<double>(before[i]) * (1.0 - 0.95)));
  EXPECT_EQ(current.state().at("layers.0.norm.weight").exp_avg, old_form.state().at("layers.0.norm.weight").exp_avg);  // AdamW untouched
  EXPECT_EQ(current.steps_taken(), 2);
  // Format 2 records the form: the sum-form optimizer refuses the converted file the same way.
  HybridOptimizer sum_again(parameters(), sum_settings);
  EXPECT_THROW(sum_again.load_state(new_path), std::runtime_error);
  // A corrupt input (one flipped bit in its last data byte) is refused, and the output it would
  // have replaced stays as it was.
  {
    std::fstream file(old_path, std::ios::binary | std::ios::in | std::ios::out);
    file.seekg(-1, std::ios::end);
    const char last = static_cast<char>(file.get() ^ 0x01);
    file.seekp(-1, std::ios::end);
    file.put(last);
  }
  const auto converted = std::filesystem::last_write_time(new_path);
  const auto converted_size = std::filesystem::file_size(new_path);
  try {
    convert_state_momentum(old_path, new_path, MomentumKind::Ema, 0.95);
    ADD_FAILURE() << "a corrupt state was converted";
  } catch (const SafetensorsError& error) {
    EXPECT_NE(std::string(error.what()).find("the data is corrupt"), std::string::npos) << error.what();
  }
  EXPECT_EQ(std::filesystem::last_write_time(new_path), converted);
  EXPECT_EQ(std::filesystem::file_size(new_path), converted_size);
  current.load_state(new_path);
  std::filesystem::remove(old_path);
  std::filesystem::remove(new_path);
}

}  // namespace
}  // namespace orthojit::runtime
