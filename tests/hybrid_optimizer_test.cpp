// The hybrid Muon + AdamW optimizer against the formulas written out here in float64 (the
// settings' formulas of docs/muon.md; each preset against its source system is
// tests/preset_fidelity_test.cpp), on fresh random data: every preset over several steps, Nesterov on and off, every lr adjustment, the tagging
// rules, the non-finite skip, the state round trip, per-head / QKV split and experts equal to
// orthogonalizing each block on its own, QK-clip.
//
// The optimizer runs its Newton–Schulz on the reference backend with f64 storage (the exact
// iteration), and the test's own NS is a plain f64 quintic written below, so the two agree to
// f64 rounding; what remains is the optimizer's documented f32 rounding of its state, its NS
// input and output and its parameters, which the reference below repeats. Tolerance: 2e-6
// relative to the largest parameter magnitude (a few f32 ulps through three steps).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/parameter_tagging.h"
#include "runtime/muon/safetensors_file.h"
#include "tests/f64_newton_schulz.h"
#include "reference/singular_values.h"
#include "support/rounding.h"

namespace orthojit::runtime {
namespace {

using Matrix = std::vector<double>;
using testing::newton_schulz;

const std::vector<std::array<double, 3>> kJordan5(5, {3.4445, -4.7750, 2.0315});

// Overwrites in place: the optimizer holds pointers to these buffers (a move-assignment would
// swap in a new one and leave it pointing at freed memory).
void refill(std::vector<float>& target, const std::vector<float>& values) { std::copy(values.begin(), values.end(), target.begin()); }

double f32(double value) { return static_cast<double>(static_cast<float>(value)); }

std::vector<float> random_values(size_t count, std::mt19937& random, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> values(count);
  for (float& v : values) v = static_cast<float>(normal(random));
  return values;
}

// The formulas, one parameter at a time, state rounded to f32 as documented.
struct ReferenceMuon {
  const OptimizerSettings& s;
  std::vector<double> momentum;
  void step(std::vector<float>& p, const std::vector<float>& g, int64_t rows, int64_t cols) {
    const MuonGroupSettings& m = s.muon;
    if (momentum.empty()) momentum.assign(p.size(), 0.0);
    Matrix update(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      const double gi = g[i];
      momentum[i] = f32(m.momentum_kind == MomentumKind::Ema ? momentum[i] + (1 - m.momentum) * (gi - momentum[i]) : m.momentum * momentum[i] + gi);
      update[i] = f32(!m.nesterov ? momentum[i] : m.momentum_kind == MomentumKind::Ema ? gi + m.momentum * (momentum[i] - gi) : gi + m.momentum * momentum[i]);
    }
    const Matrix o = newton_schulz(update, rows, cols, kJordan5, m.ns_eps.value_or(1e-7), m.norm_clamp);
    const double r = static_cast<double>(rows), c = static_cast<double>(cols);
    double scale = 1;
    if (m.lr_adjust == LrAdjust::Original) scale = std::sqrt(std::max(1.0, r / c));
    if (m.lr_adjust == LrAdjust::MatchRmsAdamW) scale = 0.2 * std::sqrt(std::max(r, c));
    if (m.lr_adjust == LrAdjust::Spectral) scale = std::sqrt(r / c);
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(p[i] * (1 - m.lr * m.weight_decay) - m.lr * scale * f32(o[i]));
  }
};

struct ReferenceAdam {
  const OptimizerSettings& s;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<float>& p, const std::vector<float>& g) {
    const AdamGroupSettings& a = s.adam;
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    const double bc1 = 1 - std::pow(a.beta1, t), bc2 = 1 - std::pow(a.beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      const double gi = g[i];
      m[i] = f32(m[i] + (1 - a.beta1) * (gi - m[i]));        // buf1.lerp_(g, 1 - beta1)
      v[i] = f32(v[i] + (1 - a.beta2) * (gi * gi - v[i]));   // buf2.lerp_(g², 1 - beta2)
      double update;
      if (a.formula == AdamFormula::Standard) update = a.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + a.eps);
      else update = (a.lr / (bc1 / std::sqrt(bc2))) * (m[i] / (a.eps + std::sqrt(v[i])));  // Moonlight: g = buf1/(eps + sqrt(buf2)); lr/scale
      p[i] = static_cast<float>(p[i] * (1 - a.lr * a.weight_decay) - update);
    }
  }
};

void expect_close(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size());
  double largest = 1e-30;
  for (float v : expected) largest = std::max(largest, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], 2e-6 * largest) << what << " element " << i;
}

OptimizerSettings exact(const std::string& preset) {
  OptimizerSettings settings = preset_settings(preset);
  settings.muon.backend = "ref";
  settings.muon.precision = ScalarType::F64;  // the exact iteration (gram and standard agree exactly in exact arithmetic)
  settings.muon.square_precision = ScalarType::F64;
  return settings;
}

Parameter make(const std::string& name, std::vector<int64_t> shape, std::vector<float>& data, std::vector<float>& grad) {
  Parameter p;
  p.name = name;
  p.shape = std::move(shape);
  p.data = data.data();
  p.grad = grad.data();
  return p;
}

// Every preset, Nesterov on and off, three steps with a fresh gradient each, a wide and a tall
// Muon matrix, a bias and an embedding on AdamW.
TEST(HybridOptimizer, EveryPresetMatchesItsFormulasOverSeveralSteps) {
  std::mt19937 random(std::random_device{}());
  for (const std::string& preset : preset_names())
    for (bool nesterov : {true, false}) {
      SCOPED_TRACE(preset + (nesterov ? " nesterov" : " plain"));
      OptimizerSettings settings = exact(preset);
      settings.muon.nesterov = nesterov;
      settings.muon.weight_decay = 0.05;  // exercise decoupled decay everywhere
      settings.adam.weight_decay = 0.02;
      std::vector<float> wide = random_values(6 * 10, random), tall = random_values(12 * 5, random), bias = random_values(7, random),
                         embed = random_values(9 * 4, random);
      std::vector<float> g_wide(wide.size()), g_tall(tall.size()), g_bias(bias.size()), g_embed(embed.size());
      HybridOptimizer optimizer({make("layers.0.mlp.up_proj.weight", {6, 10}, wide, g_wide), make("layers.0.attn.o_proj.weight", {12, 5}, tall, g_tall),
                                 make("layers.0.mlp.up_proj.bias", {7}, bias, g_bias), make("model.embed_tokens.weight", {9, 4}, embed, g_embed)},
                                settings);
      std::vector<float> e_wide = wide, e_tall = tall, e_bias = bias, e_embed = embed;
      ReferenceMuon ref_wide{settings, {}}, ref_tall{settings, {}};
      ReferenceAdam ref_bias{settings, {}, {}, 0}, ref_embed{settings, {}, {}, 0};
      for (int step = 0; step < 3; ++step) {
        refill(g_wide, random_values(g_wide.size(), random));
        refill(g_tall, random_values(g_tall.size(), random));
        refill(g_bias, random_values(g_bias.size(), random, 0.1));
        refill(g_embed, random_values(g_embed.size(), random, 0.01));
        const StepReport report = optimizer.step();
        ASSERT_FALSE(report.skipped) << report.reason;
        EXPECT_EQ(report.muon_updated, 2);
        EXPECT_EQ(report.adam_updated, 2);
        ref_wide.step(e_wide, g_wide, 6, 10);
        ref_tall.step(e_tall, g_tall, 12, 5);
        ref_bias.step(e_bias, g_bias);
        ref_embed.step(e_embed, g_embed);
        expect_close(wide, e_wide, "wide Muon matrix, step " + std::to_string(step));
        expect_close(tall, e_tall, "tall Muon matrix, step " + std::to_string(step));
        expect_close(bias, e_bias, "AdamW bias, step " + std::to_string(step));
        expect_close(embed, e_embed, "AdamW embedding, step " + std::to_string(step));
      }
      EXPECT_EQ(optimizer.steps_taken(), 3);
    }
}

TEST(HybridOptimizer, EveryLrAdjustmentScalesTheOrthogonalizedUpdate) {
  std::mt19937 random(std::random_device{}());
  for (LrAdjust adjust : {LrAdjust::None, LrAdjust::Original, LrAdjust::MatchRmsAdamW, LrAdjust::Spectral})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{12, 5}, {5, 12}}) {
      SCOPED_TRACE(std::string(to_string(adjust)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
      OptimizerSettings settings = exact("keller");
      settings.muon.lr_adjust = adjust;
      settings.muon.momentum = 0;  // the update is NS(g) itself
      settings.muon.nesterov = false;
      std::vector<float> p = random_values(static_cast<size_t>(rows * cols), random), g = random_values(p.size(), random);
      const std::vector<float> before = p;
      HybridOptimizer optimizer({make("w", {rows, cols}, p, g)}, settings);
      optimizer.step();
      const Matrix o = newton_schulz(Matrix(g.begin(), g.end()), rows, cols, kJordan5, 1e-7, false);
      const double r = static_cast<double>(rows), c = static_cast<double>(cols);
      const double scale = adjust == LrAdjust::None ? 1 : adjust == LrAdjust::Original ? std::sqrt(std::max(1.0, r / c))
                           : adjust == LrAdjust::MatchRmsAdamW                         ? 0.2 * std::sqrt(std::max(r, c))
                                                                                       : std::sqrt(r / c);
      std::vector<float> expected(p.size());
      for (size_t i = 0; i < p.size(); ++i) expected[i] = static_cast<float>(before[i] - settings.muon.lr * scale * f32(o[i]));
      expect_close(p, expected, "one step");
    }
}

TEST(HybridOptimizer, TaggingFollowsDeepSpeedsRuleAndExplicitTagsOverride) {
  EXPECT_TRUE(default_use_muon("model.layers.0.self_attn.q_proj.weight", {64, 64}));
  EXPECT_FALSE(default_use_muon("model.embed_tokens.weight", {100, 64}));
  EXPECT_FALSE(default_use_muon("transformer.wte.EMBEDDING", {100, 64}));  // case-insensitive
  EXPECT_FALSE(default_use_muon("LM_HEAD.weight", {100, 64}));
  EXPECT_FALSE(default_use_muon("model.norm.weight", {64}));
  EXPECT_TRUE(default_use_muon("experts.w1", {8, 64, 32}));
  std::vector<float> matrix(12), grad(12), vector(4), vgrad(4);
  Parameter tagged = make("model.embed_tokens.weight", {3, 4}, matrix, grad);
  tagged.use_muon = true;  // explicit tag wins over the name rule
  Parameter frozen = make("frozen", {2, 2}, vector, vgrad);
  frozen.requires_grad = false;
  HybridOptimizer optimizer({tagged, frozen}, exact("deepspeed"));
  const auto infos = optimizer.parameters();
  ASSERT_EQ(infos.size(), 1u);  // frozen parameters are not optimized at all
  EXPECT_TRUE(infos[0].muon);
  EXPECT_EQ(optimizer.state_bytes().muon, 12 * 4);
  EXPECT_EQ(optimizer.state_bytes().adam, 0);

  Parameter bad = make("layers.0.norm.weight", {4}, vector, vgrad);
  bad.use_muon = true;
  try {
    HybridOptimizer rejected({bad}, exact("deepspeed"));
    FAIL() << "a 1-D Muon parameter was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("'layers.0.norm.weight' (4) is tagged for Muon but has 1 dimension(s)"), std::string::npos) << error.what();
  }
}

TEST(HybridOptimizer, NonFiniteGradientSkipsTheWholeStepAndChangesNothing) {
  std::mt19937 random(std::random_device{}());
  std::vector<float> w = random_values(20, random), gw = random_values(20, random), b = random_values(5, random), gb = random_values(5, random);
  HybridOptimizer optimizer({make("w", {4, 5}, w, gw), make("b", {5}, b, gb)}, exact("moonlight"));
  optimizer.step();
  const auto state_before = optimizer.state();
  const std::vector<float> w_before = w, b_before = b;
  refill(gw, random_values(20, random));
  gb[3] = std::numeric_limits<float>::quiet_NaN();
  const StepReport report = optimizer.step();
  EXPECT_TRUE(report.skipped);
  EXPECT_NE(report.reason.find("parameter 'b': gradient element 3 is NaN"), std::string::npos) << report.reason;
  EXPECT_EQ(std::memcmp(w.data(), w_before.data(), w.size() * 4), 0) << "a Muon parameter changed on a skipped step";
  EXPECT_EQ(std::memcmp(b.data(), b_before.data(), b.size() * 4), 0);
  EXPECT_EQ(optimizer.state().at("w").momentum, state_before.at("w").momentum);
  EXPECT_EQ(optimizer.state().at("b").exp_avg, state_before.at("b").exp_avg);
  EXPECT_EQ(optimizer.state().at("b").step, 1);
  EXPECT_EQ(optimizer.steps_taken(), 1);
  gb[3] = std::numeric_limits<float>::infinity();
  EXPECT_NE(optimizer.step().reason.find("is infinite"), std::string::npos);
}

// The Jordan quintic written on the n x n side (docs/dsl.md, section 8): the gram strategy refuses
// it when it compiles a shape, which for an optimizer is at its first step.
std::string write_right_side_program(const std::string& name) {
  const std::string path = ::testing::TempDir() + name + "." + std::to_string(::getpid()) + ".oj";
  std::ofstream(path) << "orthogonalizer right_side {\n  precision { storage = f32; accumulate = f32; norm = f32; }\n"
                         "  coefficients jordan repeat 5;\n  step {\n    S = X.T @ X;\n    X = a * X + b * X @ S + c * X @ S @ S;\n  }\n}\n";
  return path;
}

// A kernel that fails to compile in step() (after build accepted the settings) throws before any
// parameter or state changes: the AdamW bias before the Muon matrix was once updated, and
// updated again at every retry.
TEST(HybridOptimizer, AStepWhoseCompileFailsChangesNothing) {
  std::mt19937 random(std::random_device{}());
  std::vector<float> b = random_values(5, random), gb = random_values(5, random), w = random_values(8 * 16, random), gw = random_values(8 * 16, random);
  const std::string path = write_right_side_program("failing_step");
  OptimizerSettings settings = exact("keller");
  settings.muon.program = path;
  settings.muon.strategy = "gram";
  HybridOptimizer optimizer({make("b", {5}, b, gb), make("w", {8, 16}, w, gw)}, settings);
  const std::vector<float> b_before = b, w_before = w;
  for (int attempt = 0; attempt < 2; ++attempt) {
    EXPECT_THROW(optimizer.step(), std::exception);
    EXPECT_EQ(std::memcmp(b.data(), b_before.data(), b.size() * 4), 0) << "the AdamW parameter before the failing one changed";
    EXPECT_EQ(std::memcmp(w.data(), w_before.data(), w.size() * 4), 0);
    EXPECT_EQ(optimizer.state().at("b").step, 0);
    EXPECT_EQ(optimizer.state().at("b").exp_avg, std::vector<float>(5, 0.0f));
    EXPECT_EQ(optimizer.state().at("w").momentum, std::vector<float>(8 * 16, 0.0f));
    EXPECT_EQ(optimizer.steps_taken(), 0);
  }
  std::remove(path.c_str());
}

// The program file is read at build: removing it afterwards does not fail a later step (the
// first compile of a new shape once read it again).
TEST(HybridOptimizer, TheProgramFileIsReadOnceAtBuild) {
  std::mt19937 random(std::random_device{}());
  std::vector<float> w = random_values(8 * 16, random), gw = random_values(8 * 16, random);
  const std::string path = write_right_side_program("read_once");
  OptimizerSettings settings = exact("keller");
  settings.muon.program = path;
  settings.muon.strategy = "standard";
  HybridOptimizer optimizer({make("w", {8, 16}, w, gw)}, settings);
  std::remove(path.c_str());
  const std::vector<float> w_before = w;
  EXPECT_NO_THROW(optimizer.step());
  EXPECT_NE(std::memcmp(w.data(), w_before.data(), w.size() * 4), 0);
  EXPECT_EQ(optimizer.steps_taken(), 1);
}

TEST(HybridOptimizer, StateSavesAndLoadsBitExactly) {
  std::mt19937 random(std::random_device{}());
  const std::string path = (std::filesystem::temp_directory_path() / ("orthojit_state_" + std::to_string(random()) + ".safetensors")).string();
  std::vector<float> w = random_values(24, random), gw(24), b = random_values(6, random), gb(6);
  HybridOptimizer optimizer({make("w", {4, 6}, w, gw), make("b", {6}, b, gb)}, exact("torch"));
  for (int step = 0; step < 2; ++step) {
    refill(gw, random_values(24, random));
    refill(gb, random_values(6, random));
    optimizer.step();
  }
  std::vector<std::string> phases;
  uint64_t written = 0;
  optimizer.save_state(path, [&](const FileProgress& progress) {
    if (phases.empty() || phases.back() != progress.phase) phases.emplace_back(progress.phase);
    if (progress.phase == "write") written = progress.done;
  });
  EXPECT_EQ(phases, (std::vector<std::string>{"write", "sync"}));
  EXPECT_EQ(written, SafetensorsReader(path).header().data_bytes);
  const std::vector<float> w_saved = w, b_saved = b;
  const std::vector<float> g_next = random_values(24, random), gb_next = random_values(6, random);
  refill(gw, g_next);
  refill(gb, gb_next);
  optimizer.step();
  const std::vector<float> w_after = w, b_after = b;
  // Back to the saved point: load the state, restore the parameters, take the same step.
  phases.clear();
  optimizer.load_state(path, [&](const FileProgress& progress) {
    if (phases.empty() || phases.back() != progress.phase) phases.emplace_back(progress.phase);
  });
  EXPECT_EQ(phases, (std::vector<std::string>{"read"})) << "read in the file's order: nothing left for a checksum pass";
  refill(w, w_saved);
  refill(b, b_saved);
  EXPECT_EQ(optimizer.steps_taken(), 2);
  optimizer.step();
  EXPECT_EQ(std::memcmp(w.data(), w_after.data(), w.size() * 4), 0);
  EXPECT_EQ(std::memcmp(b.data(), b_after.data(), b.size() * 4), 0);

  // A state of other parameters is refused, and nothing changes.
  std::vector<float> other(30), gother(30);
  HybridOptimizer different({make("w", {5, 6}, other, gother), make("b", {6}, b, gb)}, exact("torch"));
  different.step();
  const auto before = different.state();
  try {
    different.load_state(path);
    FAIL() << "a state of another shape was loaded";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("'w.momentum_buffer' has shape (4, 6), expected (5, 6)"), std::string::npos) << error.what();
  }
  EXPECT_EQ(different.state().at("w").momentum, before.at("w").momentum);
  // A corrupted file is refused by its checksum.
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-3, std::ios::end);
    file.put('\x7f');
  }
  EXPECT_THROW(optimizer.load_state(path), std::runtime_error);
  std::filesystem::remove(path);
}

// Per-head split ("Muon Split"), QKV split and experts: the same as orthogonalizing each block
// (each expert) on its own.
TEST(HybridOptimizer, SplitsAndExpertsEqualOrthogonalizingEachBlock) {
  std::mt19937 random(std::random_device{}());
  OptimizerSettings settings = exact("keller");
  settings.muon.momentum = 0;
  settings.muon.nesterov = false;
  settings.muon.lr_adjust = LrAdjust::None;
  const double lr = settings.muon.lr;
  auto expect_blocks = [&](const std::vector<float>& before, const std::vector<float>& after, const std::vector<float>& g, int64_t cols,
                           const std::vector<std::pair<int64_t, int64_t>>& blocks) {  // (first row, rows) in the flattened rows
    std::vector<float> expected = before;
    for (auto [row, rows] : blocks) {
      const Matrix block(g.begin() + row * cols, g.begin() + (row + rows) * cols);
      const Matrix o = newton_schulz(block, rows, cols, kJordan5, 1e-7, false);
      for (int64_t i = 0; i < rows * cols; ++i)
        expected[static_cast<size_t>(row * cols + i)] = static_cast<float>(before[static_cast<size_t>(row * cols + i)] - lr * f32(o[static_cast<size_t>(i)]));
    }
    expect_close(after, expected, "blocks");
  };
  {  // QKV (rows 4 + 2 + 2) and heads of 2 rows within each
    std::vector<float> p = random_values(8 * 6, random), g = random_values(8 * 6, random);
    const std::vector<float> before = p;
    Parameter qkv = make("attn.qkv", {8, 6}, p, g);
    qkv.row_splits = {4, 2, 2};
    qkv.head_rows = 2;
    HybridOptimizer optimizer({qkv}, settings);
    EXPECT_EQ(optimizer.parameters()[0].matrices.blocks.size(), 4u);
    optimizer.step();
    expect_blocks(before, p, g, 6, {{0, 2}, {2, 2}, {4, 2}, {6, 2}});
  }
  {  // QKV without heads
    std::vector<float> p = random_values(8 * 6, random), g = random_values(8 * 6, random);
    const std::vector<float> before = p;
    Parameter qkv = make("attn.qkv", {8, 6}, p, g);
    qkv.row_splits = {4, 2, 2};
    HybridOptimizer optimizer({qkv}, settings);
    optimizer.step();
    expect_blocks(before, p, g, 6, {{0, 4}, {4, 2}, {6, 2}});
  }
  {  // 3 experts of 4 x 5 as a batch, and flattened to one 3 x 20 matrix
    std::vector<float> p = random_values(3 * 4 * 5, random), g = random_values(60, random);
    const std::vector<float> before = p;
    Parameter experts = make("experts.w1", {3, 4, 5}, p, g);
    experts.layout = MatrixLayout::Batch;
    HybridOptimizer optimizer({experts}, settings);
    optimizer.step();
    expect_blocks(before, p, g, 5, {{0, 4}, {4, 4}, {8, 4}});
    std::vector<float> q = before;
    Parameter flat = make("experts.w1", {3, 4, 5}, q, g);
    flat.layout = MatrixLayout::Flatten;  // (d0, rest)
    HybridOptimizer flattened({flat}, settings);
    flattened.step();
    expect_blocks(before, q, g, 20, {{0, 3}});
    std::vector<float> t = before;
    Parameter trailing = make("experts.w1", {3, 4, 5}, t, g);  // keller's default: the trailing (4, 5) matrices
    HybridOptimizer batched({trailing}, settings);
    batched.step();
    expect_blocks(before, t, g, 5, {{0, 4}, {4, 4}, {8, 4}});
  }
  std::vector<float> p(12), g(12);
  Parameter bad = make("attn.qkv", {4, 3}, p, g);
  bad.head_rows = 3;
  EXPECT_THROW(HybridOptimizer({bad}, settings), std::invalid_argument);
  bad.head_rows = 0;
  bad.row_splits = {2, 1};
  EXPECT_THROW(HybridOptimizer({bad}, settings), std::invalid_argument);
}

TEST(HybridOptimizer, QkClipScalesOnlyTheHeadsAboveTau) {
  std::mt19937 random(std::random_device{}());
  std::vector<float> q = random_values(4 * 3, random), k = random_values(4 * 3, random), g(12);
  const std::vector<float> q0 = q, k0 = k;
  HybridOptimizer optimizer({make("q_proj", {4, 3}, q, g), make("k_proj", {4, 3}, k, g)}, exact("keller"));
  optimizer.qk_clip("q_proj", "k_proj", 2, {50.0, 400.0}, 100.0);  // γ = 1 and 1/4: √γ = 1 and 0.5
  for (size_t i = 0; i < 12; ++i) {
    const double factor = i < 6 ? 1.0 : 0.5;
    EXPECT_EQ(q[i], static_cast<float>(q0[i] * factor));
    EXPECT_EQ(k[i], static_cast<float>(k0[i] * factor));
  }
  EXPECT_THROW(optimizer.qk_clip("q_proj", "k_proj", 3, {1.0}, 100.0), std::invalid_argument);
  EXPECT_THROW(optimizer.qk_clip("q_proj", "nope", 2, {1.0, 1.0}, 100.0), std::invalid_argument);
  // One matrix as both q and k would be scaled by γ, not √γ: refused, nothing scaled.
  const std::vector<float> q1 = q;
  EXPECT_THROW(optimizer.qk_clip("q_proj", "q_proj", 2, {50.0, 400.0}, 100.0), std::invalid_argument);
  EXPECT_EQ(q, q1);
}

TEST(HybridOptimizer, Bf16ParametersAreRoundedOnceFromTheF64Update) {
  std::mt19937 random(std::random_device{}());
  OptimizerSettings settings = exact("deepspeed");
  std::vector<uint16_t> bias(16);
  std::vector<float> values = random_values(16, random), grad = random_values(16, random);
  for (size_t i = 0; i < 16; ++i) bias[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(round_to(ScalarType::BF16, values[i]))) >> 16);
  Parameter p;
  p.name = "bias";
  p.shape = {16};
  p.dtype = DType::BF16;
  p.data = bias.data();
  p.grad = grad.data();
  const std::vector<uint16_t> before = bias;
  HybridOptimizer optimizer({p}, settings);
  optimizer.step();
  const AdamGroupSettings& a = settings.adam;
  for (size_t i = 0; i < 16; ++i) {
    const double p0 = std::bit_cast<float>(static_cast<uint32_t>(before[i]) << 16), g = grad[i];
    const double m = f32((1 - a.beta1) * g), v = f32((1 - a.beta2) * g * g);
    const double expected = round_to(ScalarType::BF16, p0 - a.lr * (m / (1 - a.beta1)) / (std::sqrt(v / (1 - a.beta2)) + a.eps));
    EXPECT_EQ(std::bit_cast<float>(static_cast<uint32_t>(bias[i]) << 16), static_cast<float>(expected)) << i;
  }
}

// A bf16 or f16 gradient is read where it is, in its own type (no f32 copy): every part of the
// step (the fused Muon step compiled for that gradient type, a variant's unfused path, AdamW)
// must give the bits that the same gradient widened to f32 by the test (bf16: the bits shifted
// up; f16: the compiler's _Float16 conversion) gives. Each preset as shipped, on the CPU backend.
TEST(HybridOptimizer, SixteenBitGradientsGiveTheBitsOfTheirF32Widening) {
  std::mt19937 random(std::random_device{}());
  for (const DType grad_type : {DType::BF16, DType::F16})
    for (const std::string& preset : {std::string("deepspeed"), std::string("keller")})
      for (const MuonVariant variant : {MuonVariant::Muon, MuonVariant::NorMuon}) {
        SCOPED_TRACE(std::string(grad_type == DType::BF16 ? "bf16" : "f16") + " gradients, " + preset + ", " + to_string(variant));
        OptimizerSettings settings = preset_settings(preset);
        settings.muon.variant = variant;
        settings.adam.weight_decay = 0.01;
        const std::vector<float> start_matrix = random_values(24 * 40, random), start_bias = random_values(40, random);
        std::vector<float> matrix16 = start_matrix, bias16 = start_bias, matrix32 = start_matrix, bias32 = start_bias;
        std::vector<uint16_t> g_matrix16(matrix16.size()), g_bias16(bias16.size());
        std::vector<float> g_matrix32(matrix16.size()), g_bias32(bias16.size());
        auto parameter = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float>& data, const void* grad, DType type) {
          Parameter p;
          p.name = name;
          p.shape = std::move(shape);
          p.data = data.data();
          p.grad = grad;
          p.grad_dtype = type;
          return p;
        };
        HybridOptimizer sixteen({parameter("layers.0.w", {24, 40}, matrix16, g_matrix16.data(), grad_type),
                                 parameter("layers.0.bias", {40}, bias16, g_bias16.data(), grad_type)},
                                settings);
        HybridOptimizer widened({parameter("layers.0.w", {24, 40}, matrix32, g_matrix32.data(), DType::F32),
                                 parameter("layers.0.bias", {40}, bias32, g_bias32.data(), DType::F32)},
                                settings);
        for (int step = 0; step < 2; ++step) {
          for (auto [bits, wide] : {std::pair{&g_matrix16, &g_matrix32}, std::pair{&g_bias16, &g_bias32}}) {
            const std::vector<float> values = random_values(bits->size(), random, 0.5);
            for (size_t i = 0; i < values.size(); ++i) {
              if (grad_type == DType::BF16) {
                (*bits)[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(values[i]) >> 16);
                (*wide)[i] = std::bit_cast<float>(static_cast<uint32_t>((*bits)[i]) << 16);
              } else {
                (*bits)[i] = std::bit_cast<uint16_t>(static_cast<_Float16>(values[i]));
                (*wide)[i] = static_cast<float>(std::bit_cast<_Float16>((*bits)[i]));
              }
            }
          }
          const StepReport a = sixteen.step(), b = widened.step();
          ASSERT_EQ(a.muon_updated, 1);
          ASSERT_EQ(a.adam_updated, 1);
          ASSERT_EQ(b.muon_updated, 1);
          for (size_t i = 0; i < matrix16.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(matrix16[i]), std::bit_cast<uint32_t>(matrix32[i])) << "matrix element " << i << ", step " << step;
          for (size_t i = 0; i < bias16.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(bias16[i]), std::bit_cast<uint32_t>(bias32[i])) << "bias element " << i << ", step " << step;
        }
        EXPECT_NE(matrix16, start_matrix);
        EXPECT_NE(bias16, start_bias);
      }
}

// Muon parameters step together: every block of every parameter, grouped by shape and types into
// one batched Muon step (whole rounds of one matrix per worker, the leftovers split across the
// workers). Each parameter must come out with the bits it gets in an optimizer of its own, over
// steps with fresh gradients: equal shapes (five, on three workers: a whole round and two
// leftovers), their transposes, a 16-bit gradient of the same shape (another group), a QKV split
// into blocks, a missing gradient (zeros) and an AdamW bias. A block given another's gradient,
// momentum, parameter or lr·s, or a leftover skipped, breaks it.
TEST(HybridOptimizer, EqualShapesStepTogetherWithTheBitsEachGetsAlone) {
  std::mt19937 random(std::random_device{}());
  OptimizerSettings settings = preset_settings("keller");  // bf16 NS on the cpu backend
  settings.muon.threads = 3;
  settings.muon.weight_decay = 0.01;
  settings.missing_gradient = MissingGradient::Zero;
  struct Spec {
    std::string name;
    std::vector<int64_t> shape;
    DType grad_type = DType::F32;
    std::vector<int64_t> row_splits = {};
  };
  std::vector<Spec> specs;
  for (int i = 0; i < 5; ++i) specs.push_back({"layers." + std::to_string(i) + ".w", {24, 40}});
  for (int i = 0; i < 3; ++i) specs.push_back({"layers." + std::to_string(i) + ".up", {40, 24}});
  specs.push_back({"layers.5.w", {24, 40}, DType::BF16});
  specs.push_back({"attn.qkv", {24, 40}, DType::F32, {8, 8, 8}});
  specs.push_back({"layers.0.bias", {40}});
  const size_t count = specs.size();
  std::vector<std::vector<float>> together(count), alone(count), gradients(count);
  std::vector<std::vector<uint16_t>> gradients16(count);
  auto parameter = [&](size_t i, std::vector<float>& data) {
    Parameter p;
    p.name = specs[i].name;
    p.shape = specs[i].shape;
    p.data = data.data();
    p.row_splits = specs[i].row_splits;
    p.grad_dtype = specs[i].grad_type;
    p.grad = specs[i].grad_type == DType::BF16 ? static_cast<const void*>(gradients16[i].data()) : gradients[i].data();
    return p;
  };
  std::vector<Parameter> all;
  std::vector<std::unique_ptr<HybridOptimizer>> singles;
  for (size_t i = 0; i < count; ++i) {
    int64_t elements = 1;
    for (int64_t d : specs[i].shape) elements *= d;
    together[i] = random_values(static_cast<size_t>(elements), random);
    alone[i] = together[i];
    gradients[i].resize(together[i].size());
    gradients16[i].resize(together[i].size());
    all.push_back(parameter(i, together[i]));
    singles.push_back(std::make_unique<HybridOptimizer>(std::vector<Parameter>{parameter(i, alone[i])}, settings));
  }
  HybridOptimizer grouped(all, settings);
  const size_t missing = 2;  // layers.2.w: no gradient at the second step
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    for (size_t i = 0; i < count; ++i) {
      const std::vector<float> values = random_values(gradients[i].size(), random, 0.5);
      std::copy(values.begin(), values.end(), gradients[i].begin());  // in place: the optimizers hold its address
      for (size_t k = 0; k < gradients[i].size(); ++k) gradients16[i][k] = static_cast<uint16_t>(std::bit_cast<uint32_t>(gradients[i][k]) >> 16);
    }
    const void* grad = step == 1 ? nullptr : static_cast<const void*>(gradients[missing].data());
    grouped.set_gradient(specs[missing].name, grad, DType::F32);
    singles[missing]->set_gradient(specs[missing].name, grad, DType::F32);
    const StepReport report = grouped.step();
    ASSERT_FALSE(report.skipped) << report.reason;
    EXPECT_EQ(report.muon_updated, static_cast<int>(count - 1));
    EXPECT_EQ(report.adam_updated, 1);
    EXPECT_EQ(report.without_gradient, step == 1 ? 1 : 0);
    for (size_t i = 0; i < count; ++i) {
      singles[i]->step();
      for (size_t k = 0; k < together[i].size(); ++k)
        ASSERT_EQ(std::bit_cast<uint32_t>(together[i][k]), std::bit_cast<uint32_t>(alone[i][k])) << specs[i].name << " element " << k;
    }
  }
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(grouped.state().at(specs[i].name).momentum, singles[i]->state().at(specs[i].name).momentum) << specs[i].name;
}

// Each preset as shipped (16-bit NS on the CPU backend, gram for deepspeed): one step from zero
// momentum moves a matrix by lr·s·O with O's singular values in the band the quintic maps into
// (jordan: about 0.68..1.14 after 5 steps; 0.5..1.3 leaves room for bf16/f16 rounding).
TEST(HybridOptimizer, PresetsAsShippedOrthogonalizeOnTheCpuBackend) {
  std::mt19937 random(std::random_device{}());
  for (const std::string& preset : preset_names()) {
    SCOPED_TRACE(preset);
    OptimizerSettings settings = preset_settings(preset);
    settings.muon.weight_decay = 0;
    settings.muon.lr_adjust = LrAdjust::None;
    std::vector<float> p = random_values(24 * 96, random), g = random_values(24 * 96, random);
    const std::vector<float> before = p;
    HybridOptimizer optimizer({make("w", {24, 96}, p, g)}, settings);
    const StepReport report = optimizer.step();
    ASSERT_EQ(report.muon_updated, 1);
    std::vector<double> update(p.size());
    for (size_t i = 0; i < p.size(); ++i) update[i] = (static_cast<double>(before[i]) - p[i]) / settings.muon.lr;
    const auto sigma = reference::singular_values(update, 24, 96);
    for (double value : sigma) {
      EXPECT_GT(value, 0.5);
      EXPECT_LT(value, 1.3);
    }
  }
}

TEST(HybridOptimizer, PresetsAndSettingsSayWhatIsValid) {
  EXPECT_THROW(preset_settings("adam"), std::invalid_argument);
  try {
    preset_settings("adam");
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("presets: deepspeed, keller, moonlight, torch"), std::string::npos);
  }
  OptimizerSettings settings = preset_settings("deepspeed");
  EXPECT_EQ(settings.muon.lr, 0.02);
  EXPECT_EQ(settings.muon.strategy, "gram");
  EXPECT_EQ(settings.adam.eps, 1e-10);
  apply_setting(settings, "muon.lr", "0.01");
  apply_setting(settings, "adam.formula", "moonlight");
  EXPECT_EQ(settings.muon.lr, 0.01);
  EXPECT_EQ(settings.adam.formula, AdamFormula::Moonlight);
  EXPECT_THROW(apply_setting(settings, "muon.momentum", "1.5"), std::invalid_argument);
  EXPECT_THROW(apply_setting(settings, "muon.lr_adjust", "cubic"), std::invalid_argument);
  EXPECT_THROW(apply_setting(settings, "muon.learning_rate", "0.1"), std::invalid_argument);
  EXPECT_THROW(apply_setting(settings, "adam.eps", "abc"), std::invalid_argument);
}

}  // namespace
}  // namespace orthojit::runtime
