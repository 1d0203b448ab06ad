// NorMuon and AdaMuon (muon.variant) against their papers' formulas written out here in float64:
// NorMuon, arXiv 2510.05491 and normuon_update in zichongli5/NorMuon normuon.py; AdaMuon, arXiv
// 2507.11005 (Algorithm: sign-stabilized NS, element-wise second moment on O, RMS-aligned
// rescaling) and Chongjie-Si/AdaMuon adamuon.py. Several steps on fresh random gradients, a wide,
// a tall and a batched (experts) parameter, and the saved state's round trip and refusals.
//
// The optimizer runs its Newton–Schulz on the reference backend in f64 storage (the exact
// iteration) and this test's NS is the plain f64 quintic of f64_newton_schulz.h, so the two agree
// to f64 rounding (~1e-15 relative). What remains is the optimizer's documented f32 rounding of
// its state, of U, O and O' and of the parameters, which the reference repeats at the same
// points; a 1e-15 difference can move one of those f32 roundings by one ulp (6e-8 relative),
// which the lr-sized update carries into p at about lr·6e-8. Tolerance: 2e-6 relative to the
// largest parameter magnitude over four steps (as hybrid_optimizer_test.cpp argues for Muon).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "runtime/muon/device_optimizer.h"
#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/memory_space.h"
#include "tests/f64_newton_schulz.h"

namespace orthojit::runtime {
namespace {

const std::vector<std::array<double, 3>> kJordan5(5, {3.4445, -4.7750, 2.0315});

double f32(double value) { return static_cast<double>(static_cast<float>(value)); }

std::vector<float> random_values(size_t count, std::mt19937& random, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> values(count);
  for (float& v : values) v = static_cast<float>(normal(random));
  return values;
}

void refill(std::vector<float>& target, const std::vector<float>& values) { std::copy(values.begin(), values.end(), target.begin()); }

double frobenius(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v * v;
  return std::sqrt(sum);
}

// One parameter of `batch` matrices (rows x cols) under NorMuon or AdaMuon, from the papers'
// formulas; EMA momentum with Nesterov (both references: buf.lerp_(g, 1-β), g.lerp_(buf, β)).
struct ReferenceVariant {
  MuonVariant variant;
  double lr, beta, weight_decay, beta2, eps;
  bool sign = true;
  bool rms_adamw_scale = false;  // AdaMuon's published step: lr·0.2·sqrt(max(r, c))
  std::vector<double> momentum, second;
  int64_t t = 0;

  void step(std::vector<float>& p, const std::vector<float>& g, int64_t batch, int64_t rows, int64_t cols) {
    const size_t matrix = static_cast<size_t>(rows * cols);
    if (momentum.empty()) {
      momentum.assign(p.size(), 0.0);
      second.assign(variant == MuonVariant::NorMuon ? static_cast<size_t>(batch * rows) : p.size(), 0.0);
    }
    ++t;
    for (int64_t b = 0; b < batch; ++b) {
      const size_t first = static_cast<size_t>(b) * matrix;
      std::vector<double> u(matrix);
      for (size_t i = 0; i < matrix; ++i) {
        const double gi = g[first + i];
        momentum[first + i] = f32(momentum[first + i] + (1 - beta) * (gi - momentum[first + i]));
        u[i] = f32(gi + beta * (momentum[first + i] - gi));
        if (variant == MuonVariant::AdaMuon && sign) u[i] = u[i] > 0 ? 1.0 : u[i] < 0 ? -1.0 : 0.0;  // Sign(M_t) before NS
      }
      std::vector<double> o = testing::newton_schulz(u, rows, cols, kJordan5, 1e-7, false);
      for (double& v : o) v = f32(v);
      std::vector<double> out(matrix);
      if (variant == MuonVariant::NorMuon) {
        // vnorm = ‖O‖; v_mean = mean(O², dim=-1); v ← lerp(v, v_mean, 1−β2); O /= (√v + eps);
        // O *= vnorm / (‖O‖ + eps).
        const double norm = frobenius(o);
        for (int64_t r = 0; r < rows; ++r) {
          double mean = 0;
          for (int64_t c = 0; c < cols; ++c) mean += o[static_cast<size_t>(r * cols + c)] * o[static_cast<size_t>(r * cols + c)];
          mean /= static_cast<double>(cols);
          double& v = second[static_cast<size_t>(b * rows + r)];
          v = f32(v + (1 - beta2) * (mean - v));
          for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = o[static_cast<size_t>(r * cols + c)] / (std::sqrt(v) + eps);
        }
        const double rescale = norm / (frobenius(out) + eps);
        for (double& v : out) v = f32(v * rescale);
      } else {
        // V_t = β2·V_{t−1} + (1−β2)·O⊙O; Ô = O / (√(V_t/(1−β2^t)) + eps); Ô · √min(r,c) / (‖Ô‖ + eps).
        const double bias2 = 1 - std::pow(beta2, static_cast<double>(t));
        for (size_t i = 0; i < matrix; ++i) {
          double& v = second[first + i];
          v = f32(beta2 * v + (1 - beta2) * o[i] * o[i]);
          out[i] = o[i] / (std::sqrt(v / bias2) + eps);
        }
        const double rescale = std::sqrt(static_cast<double>(std::min(rows, cols))) / (frobenius(out) + eps);
        for (double& v : out) v = f32(v * rescale);
      }
      const double r = static_cast<double>(rows), c = static_cast<double>(cols);
      const double scale = rms_adamw_scale ? 0.2 * std::sqrt(std::max(r, c)) : std::sqrt(std::max(1.0, r / c));
      for (size_t i = 0; i < matrix; ++i) p[first + i] = static_cast<float>(p[first + i] * (1 - lr * weight_decay) - lr * scale * out[i]);
    }
  }
};

OptimizerSettings exact(MuonVariant variant) {
  OptimizerSettings settings = preset_settings("keller");  // EMA + Nesterov, jordan × 5 on X / (‖X‖ + 1e-7)
  settings.muon.backend = "ref";
  settings.muon.precision = ScalarType::F64;
  settings.muon.variant = variant;
  settings.muon.weight_decay = 0.05;
  return settings;
}

Parameter make(const std::string& name, std::vector<int64_t> shape, std::vector<float>& data, std::vector<float>& grad, MatrixLayout layout = MatrixLayout::Auto) {
  Parameter p;
  p.name = name;
  p.shape = std::move(shape);
  p.data = data.data();
  p.grad = grad.data();
  p.layout = layout;
  p.use_muon = true;
  return p;
}

void expect_close(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size());
  double largest = 1e-30;
  for (float v : expected) largest = std::max(largest, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < actual.size(); ++i) ASSERT_NEAR(actual[i], expected[i], 2e-6 * largest) << what << " element " << i;
}

struct Case {
  MuonVariant variant;
  bool sign;
  bool published_scale;  // AdaMuon with lr_adjust = match_rms_adamw (adamuon.py's step)
  std::string label;
};

TEST(MuonVariants, MatchTheirPapersFormulasOverSeveralSteps) {
  std::mt19937 random(std::random_device{}());
  const Case cases[] = {{MuonVariant::NorMuon, true, false, "normuon"},
                        {MuonVariant::AdaMuon, true, true, "adamuon (sign, match_rms_adamw)"},
                        {MuonVariant::AdaMuon, false, false, "adamuon (no sign: adamuon.py's code)"}};
  for (const Case& test : cases) {
    SCOPED_TRACE(test.label);
    OptimizerSettings settings = exact(test.variant);
    settings.muon.sign_momentum = test.sign;
    if (test.published_scale) settings.muon.lr_adjust = LrAdjust::MatchRmsAdamW;
    if (test.variant == MuonVariant::NorMuon) settings.muon.variant_beta2 = 0.9;  // a non-default β2 reaches the formula
    std::vector<float> wide = random_values(6 * 10, random), tall = random_values(12 * 5, random), experts = random_values(2 * 4 * 7, random);
    std::vector<float> g_wide(wide.size()), g_tall(tall.size()), g_experts(experts.size());
    HybridOptimizer optimizer({make("wide", {6, 10}, wide, g_wide), make("tall", {12, 5}, tall, g_tall),
                               make("experts", {2, 4, 7}, experts, g_experts, MatrixLayout::Batch)},
                              settings);
    const double beta2 = settings.muon.variant_beta2.value_or(test.variant == MuonVariant::AdaMuon ? 0.999 : 0.95);
    const double eps = test.variant == MuonVariant::AdaMuon ? 1e-8 : 1e-10;
    auto reference = [&] { return ReferenceVariant{test.variant, settings.muon.lr, settings.muon.momentum, settings.muon.weight_decay, beta2, eps, test.sign,
                                                   test.published_scale, {}, {}, 0}; };
    ReferenceVariant ref_wide = reference(), ref_tall = reference(), ref_experts = reference();
    std::vector<float> e_wide = wide, e_tall = tall, e_experts = experts;
    for (int step = 0; step < 4; ++step) {
      refill(g_wide, random_values(g_wide.size(), random));
      refill(g_tall, random_values(g_tall.size(), random));
      refill(g_experts, random_values(g_experts.size(), random));
      const std::vector<float> before = wide;
      const StepReport report = optimizer.step();
      ASSERT_FALSE(report.skipped) << report.reason;
      EXPECT_EQ(report.muon_updated, 3);
      ref_wide.step(e_wide, g_wide, 1, 6, 10);
      ref_tall.step(e_tall, g_tall, 1, 12, 5);
      ref_experts.step(e_experts, g_experts, 2, 4, 7);
      expect_close(wide, e_wide, "wide, step " + std::to_string(step));
      expect_close(tall, e_tall, "tall, step " + std::to_string(step));
      expect_close(experts, e_experts, "experts, step " + std::to_string(step));
      if (test.published_scale) {
        // The paper's RMS alignment: the step's RMS is 0.2·lr (AdamW's), up to the decay term
        // and eps/‖Ô‖ ~ 1e-9; f32 parameters of magnitude ~3 carry 2e-7 absolute rounding each,
        // against 0.2·lr = 4e-3: 1e-4 relative is loose for that and tight for a wrong scale.
        double sum = 0;
        for (size_t i = 0; i < wide.size(); ++i) {
          const double delta = wide[i] - before[i] * (1 - settings.muon.lr * settings.muon.weight_decay);
          sum += delta * delta;
        }
        EXPECT_NEAR(std::sqrt(sum / static_cast<double>(wide.size())), 0.2 * settings.muon.lr, 1e-4 * 0.2 * settings.muon.lr);
      }
    }
    // The state: NorMuon one f32 per row of each matrix, AdaMuon one per element and a step count.
    const auto& state = optimizer.state();
    EXPECT_EQ(state.at("experts").second_moment.size(), test.variant == MuonVariant::NorMuon ? 8u : 56u);
    EXPECT_EQ(state.at("wide").variant_step, test.variant == MuonVariant::AdaMuon ? 4 : 0);
    EXPECT_EQ(optimizer.state_bytes().muon, test.variant == MuonVariant::NorMuon ? 4 * (60 + 60 + 56) + 4 * (6 + 12 + 8) : 8 * (60 + 60 + 56) + 3 * 8);
  }
}

// Save, step, load, step again: the same bits; a state of another variant (or of plain Muon) is
// refused with the setting to use, and nothing changes.
TEST(MuonVariants, StateRoundTripsAndOtherVariantsAreRefused) {
  std::mt19937 random(std::random_device{}());
  for (MuonVariant variant : {MuonVariant::NorMuon, MuonVariant::AdaMuon}) {
    SCOPED_TRACE(to_string(variant));
    const std::string path =
        (std::filesystem::temp_directory_path() / ("orthojit_variant_state_" + std::to_string(random()) + ".safetensors")).string();
    std::vector<float> w = random_values(5 * 8, random), gw(w.size()), e = random_values(3 * 4 * 6, random), ge(e.size());
    HybridOptimizer optimizer({make("w", {5, 8}, w, gw), make("e", {3, 4, 6}, e, ge, MatrixLayout::Batch)}, exact(variant));
    for (int step = 0; step < 2; ++step) {
      refill(gw, random_values(gw.size(), random));
      refill(ge, random_values(ge.size(), random));
      optimizer.step();
    }
    optimizer.save_state(path);
    const std::vector<float> w_saved = w, e_saved = e;
    refill(gw, random_values(gw.size(), random));
    refill(ge, random_values(ge.size(), random));
    optimizer.step();
    const std::vector<float> w_after = w, e_after = e;
    const auto state_after = optimizer.state();
    optimizer.load_state(path);
    refill(w, w_saved);
    refill(e, e_saved);
    optimizer.step();
    EXPECT_EQ(std::memcmp(w.data(), w_after.data(), w.size() * 4), 0);
    EXPECT_EQ(std::memcmp(e.data(), e_after.data(), e.size() * 4), 0);
    EXPECT_EQ(optimizer.state().at("e").second_moment, state_after.at("e").second_moment);
    EXPECT_EQ(optimizer.state().at("w").variant_step, state_after.at("w").variant_step);

    // Into another variant, and into plain Muon: refused, naming the setting; nothing changes.
    const MuonVariant other = variant == MuonVariant::NorMuon ? MuonVariant::AdaMuon : MuonVariant::NorMuon;
    for (MuonVariant wanted : {other, MuonVariant::Muon}) {
      std::vector<float> w2 = w, e2 = e;
      HybridOptimizer different({make("w", {5, 8}, w2, gw), make("e", {3, 4, 6}, e2, ge, MatrixLayout::Batch)}, exact(wanted));
      different.step();
      const auto before = different.state();
      try {
        different.load_state(path);
        FAIL() << "a " << to_string(variant) << " state was loaded into " << to_string(wanted);
      } catch (const std::runtime_error& error) {
        EXPECT_NE(std::string(error.what()).find(std::string("muon.variant = ") + to_string(variant)), std::string::npos) << error.what();
      }
      EXPECT_EQ(different.state().at("w").momentum, before.at("w").momentum);
    }
    std::filesystem::remove(path);
  }
}

TEST(MuonVariants, SettingsParseAndTheDevicePathsRefuseClearly) {
  OptimizerSettings settings = preset_settings("keller");
  apply_setting(settings, "muon.variant", "normuon");
  apply_setting(settings, "muon.beta2", "0.9");
  apply_setting(settings, "muon.variant_eps", "1e-9");
  apply_setting(settings, "muon.sign_momentum", "false");
  EXPECT_EQ(settings.muon.variant, MuonVariant::NorMuon);
  EXPECT_EQ(settings.muon.variant_beta2, 0.9);
  EXPECT_EQ(settings.muon.variant_eps, 1e-9);
  EXPECT_FALSE(settings.muon.sign_momentum);
  EXPECT_NE(describe(settings).find("muon.variant = normuon"), std::string::npos);
  try {
    apply_setting(settings, "muon.variant", "adamw");
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("not muon, normuon or adamuon"), std::string::npos) << error.what();
  }
  EXPECT_THROW(apply_setting(settings, "muon.beta2", "1"), std::invalid_argument);
  EXPECT_THROW(apply_setting(settings, "muon.variant_eps", "0"), std::invalid_argument);

  std::vector<float> w(12, 0.5f), g(12, 0.1f);
  settings.muon.variant = MuonVariant::AdaMuon;
  try {
    DeviceOptimizer device({make("w", {3, 4}, w, g)}, settings, host_memory());
    FAIL() << "the device optimizer accepted muon.variant = adamuon";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("muon.variant = adamuon"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace orthojit::runtime
