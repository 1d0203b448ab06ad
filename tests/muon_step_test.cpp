// The Muon step as IR (compiler/ir/muon_step.h): momentum fused into the normalize, the update
// after (CPU) or inside (CUDA) the last kernel. Checked here on the host backends:
//   * the IR the passes make (what is fused, what has storage);
//   * the CPU backend's compiled step against the three separate rules it replaces
//     (muon_momentum, the orthogonalizer, the update), bit for bit, over the momentum forms,
//     the gradient and parameter types, wide, tall (oriented), square and batched shapes with
//     per-matrix scalars;
//   * the reference backend's f64 step against the formulas written out here (each system's
//     momentum, Newton–Schulz in plain f64, the update), on fresh random inputs.
// (tests/cuda_muon_step_test.cpp runs the generated CUDA of the same IR in the host emulation.)
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "f64_newton_schulz.h"
#include "ir/printer.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "runtime/muon/update_rules.h"
#include "runtime/orthogonalize.h"
#include "support/rounding.h"

namespace orthojit {
namespace {

using ir::MuonStepMatrix;
using ir::MuonStepSpec;

// One matrix's data in the storage types of a spec: g (grad type), M (f32), p (param type).
struct MatrixData {
  std::vector<uint16_t> g16, p16;
  std::vector<float> g32, p32, momentum;
  std::vector<float> gradient_f32() const {  // g as the host rules see it (exact)
    if (!g16.empty()) {
      std::vector<float> out(g16.size());
      for (size_t i = 0; i < g16.size(); ++i) out[i] = static_cast<float>(ir::load_stored(grad_type, g16.data(), static_cast<int64_t>(i)));
      return out;
    }
    return g32;
  }
  const void* grad() const { return g16.empty() ? static_cast<const void*>(g32.data()) : g16.data(); }
  void* param() { return p16.empty() ? static_cast<void*>(p32.data()) : p16.data(); }
  ScalarType grad_type = ScalarType::F32, param_type = ScalarType::F32;
};

MatrixData random_matrix(const MuonStepSpec& spec, int64_t elements, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  MatrixData data;
  data.grad_type = spec.grad;
  data.param_type = spec.param;
  auto fill = [&](ScalarType type, std::vector<uint16_t>& bits, std::vector<float>& wide, double scale) {
    if (type == ScalarType::F32) {
      for (int64_t i = 0; i < elements; ++i) wide.push_back(static_cast<float>(scale * normal(rng)));
    } else {
      bits.resize(static_cast<size_t>(elements));
      for (int64_t i = 0; i < elements; ++i) ir::store_rounded(type, bits.data(), i, scale * normal(rng));
    }
  };
  fill(spec.grad, data.g16, data.g32, 1e-2);
  fill(spec.param, data.p16, data.p32, 0.5);
  for (int64_t i = 0; i < elements; ++i) data.momentum.push_back(static_cast<float>(1e-2 * normal(rng)));
  return data;
}

MuonStepMatrix pointers(MatrixData& data, double beta, double step, double decay) {
  MuonStepMatrix io;
  io.grad = reinterpret_cast<std::uintptr_t>(data.grad());
  io.momentum = reinterpret_cast<std::uintptr_t>(data.momentum.data());
  io.param = reinterpret_cast<std::uintptr_t>(data.param());
  io.beta = beta;
  io.step = step;
  io.decay = decay;
  return io;
}

std::vector<uint32_t> bits_of(const MatrixData& data) {  // M and p, as bits
  std::vector<uint32_t> bits;
  for (float m : data.momentum) bits.push_back(std::bit_cast<uint32_t>(m));
  for (float p : data.p32) bits.push_back(std::bit_cast<uint32_t>(p));
  for (uint16_t p : data.p16) bits.push_back(p);
  return bits;
}

TEST(MuonStep, MomentumAndUpdateAreFusedIntoTheEnds) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  for (bool fuse_update : {true, false}) {
    passes::CompileOptions options;
    options.rows = 96;
    options.cols = 64;  // tall: the step runs oriented
    options.batch = 2;
    options.muon_step = MuonStepSpec{true, true, ScalarType::BF16, ScalarType::BF16};
    options.fuse_update = fuse_update;
    const ir::Function function = passes::compile_program(program, options);
    SCOPED_TRACE(ir::print_function(function));
    int momenta = 0, updates = 0, outputs = 0;
    for (const ir::Node& node : function.nodes) {
      if (node.kind == ir::OpKind::Momentum) {
        ++momenta;
        EXPECT_TRUE(node.fused);
        EXPECT_EQ(node.buffer, -1);  // U is never stored
      }
      if (node.kind == ir::OpKind::Update) {
        ++updates;
        EXPECT_EQ(node.fused, fuse_update);
        EXPECT_EQ(node.type, ScalarType::BF16);
        ir::NodeId root = node.operands[0];
        EXPECT_EQ(function.node(root).kind, ir::OpKind::Transpose);  // oriented back
        while (function.node(root).kind == ir::OpKind::Transpose) root = function.node(root).operands[0];
        EXPECT_EQ(function.node(root).kind, ir::OpKind::Gemm);
        EXPECT_EQ(function.node(root).buffer >= 0, !fuse_update);  // the last X is stored only when the update reads it back
      }
      outputs += node.kind == ir::OpKind::Output;
    }
    EXPECT_EQ(momenta, 1);
    EXPECT_EQ(updates, 1);
    EXPECT_EQ(outputs, 0);
    EXPECT_EQ(function.node(function.input_node()).type, ScalarType::BF16);  // the gradient, read in its own type
    const std::string text = ir::print_function(function);
    EXPECT_NE(text.find("muon_step{ema nesterov, grad bf16, param bf16}"), std::string::npos);
    EXPECT_NE(text.find("fused into its normalize"), std::string::npos);
  }
}

TEST(MuonStep, CpuStepIsTheSeparateRulesBitForBit) {
  const auto backends = runtime::available_backends();
  if (std::find(backends.begin(), backends.end(), "cpu") == backends.end()) GTEST_SKIP() << "this build has no CPU backend";
  std::mt19937 rng(20261201);
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  struct Shape {
    int64_t rows, cols, batch;
  };
  const Shape shapes[] = {{40, 72, 1}, {72, 40, 2}, {48, 48, 1}, {17, 130, 3}};
  const std::pair<ScalarType, ScalarType> types[] = {
      {ScalarType::F32, ScalarType::F32}, {ScalarType::BF16, ScalarType::BF16}, {ScalarType::F16, ScalarType::F32}, {ScalarType::F32, ScalarType::F16}};
  int cases = 0;
  for (const Shape& shape : shapes)
    for (int form = 0; form < 4; ++form) {
      const auto [grad_type, param_type] = types[static_cast<size_t>(cases % 4)];
      const MuonStepSpec spec{form % 2 == 0, form < 2, grad_type, param_type};
      ++cases;
      SCOPED_TRACE(spec.describe() + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) + " x" + std::to_string(shape.batch));
      const int64_t elements = shape.rows * shape.cols;
      std::vector<MatrixData> fused, separate;
      std::vector<MuonStepMatrix> matrices;
      std::vector<double> betas, steps, decays;
      for (int64_t z = 0; z < shape.batch; ++z) {
        fused.push_back(random_matrix(spec, elements, rng));
        betas.push_back(0.9 + 0.02 * static_cast<double>(z));
        steps.push_back(0.02 * (1.0 + static_cast<double>(z)));
        decays.push_back(1.0 - 0.02 * 0.1 * static_cast<double>(z));
      }
      separate = fused;
      for (int64_t z = 0; z < shape.batch; ++z) matrices.push_back(pointers(fused[static_cast<size_t>(z)], betas[z], steps[z], decays[z]));
      runtime::OrthogonalizeOptions options;
      options.strategy = "standard";
      options.backend = "cpu";
      options.precision = ScalarType::BF16;
      options.muon_step = spec;
      runtime::compile_orthogonalizer(program, shape.batch, shape.rows, shape.cols, options)->run_muon_step(matrices, nullptr);

      // The rules it replaces, one after the other: momentum, the orthogonalizer on U, the update.
      std::vector<float> update(static_cast<size_t>(elements * shape.batch)), orthogonal(update.size());
      for (int64_t z = 0; z < shape.batch; ++z) {
        runtime::MuonGroupSettings muon;
        muon.momentum = betas[z];
        muon.nesterov = spec.nesterov;
        muon.momentum_kind = spec.ema ? runtime::MomentumKind::Ema : runtime::MomentumKind::Sum;
        const std::vector<float> g = separate[static_cast<size_t>(z)].gradient_f32();
        runtime::muon_momentum(muon, g.data(), separate[static_cast<size_t>(z)].momentum.data(), update.data() + z * elements, elements);
      }
      options.muon_step.reset();
      runtime::compile_orthogonalizer(program, shape.batch, shape.rows, shape.cols, options)->run(update.data(), orthogonal.data());
      for (int64_t z = 0; z < shape.batch; ++z) {
        MatrixData& data = separate[static_cast<size_t>(z)];
        for (int64_t i = 0; i < elements; ++i)
          ir::store_rounded(param_type, data.param(), i,
                            ir::load_stored(param_type, data.param(), i) * decays[z] - steps[z] * static_cast<double>(orthogonal[static_cast<size_t>(z * elements + i)]));
        EXPECT_EQ(bits_of(fused[static_cast<size_t>(z)]), bits_of(data)) << "matrix " << z;
      }
    }
}

// The formulas of each momentum form, written out (not the library's helpers).
struct F64Reference {
  std::vector<float> momentum;
  std::vector<float> param;
};

F64Reference f64_formulas(bool ema, bool nesterov, const std::vector<float>& g, std::vector<float> momentum, std::vector<float> param, double beta,
                          double step, double decay, int64_t rows, int64_t cols, const dsl::Program& program) {
  std::vector<double> u(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i], mi = momentum[i];
    momentum[i] = static_cast<float>(ema ? mi + (1.0 - beta) * (gi - mi) : beta * mi + gi);
    const double m = momentum[i];
    u[i] = static_cast<float>(!nesterov ? m : ema ? gi + beta * (m - gi) : gi + beta * m);
  }
  std::vector<std::array<double, 3>> steps;
  for (const dsl::Triple& t : program.steps) steps.push_back({t.a, t.b, t.c});
  const std::vector<double> o = testing::newton_schulz(u, rows, cols, steps, program.normalization.eps, false);
  for (size_t i = 0; i < param.size(); ++i) param[i] = static_cast<float>(param[i] * decay - step * static_cast<double>(static_cast<float>(o[i])));
  return {momentum, param};
}

TEST(MuonStep, ReferenceStepInFloat64MatchesTheFormulas) {
  // f64 storage: the interpreter's iteration is exact up to f64 rounding, so what is left between
  // it and the formulas is the f32 rounding of O (a flip is one f32 ulp of O, times the step) and
  // of p. The momentum is computed by the same expression in the same order: bit-equal.
  std::mt19937 rng(7);
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  for (int form = 0; form < 4; ++form)
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{24, 40}, {40, 24}}) {
      const bool ema = form % 2 == 0, nesterov = form < 2;
      const MuonStepSpec spec{ema, nesterov, ScalarType::F32, ScalarType::F32};
      SCOPED_TRACE(spec.describe() + " " + std::to_string(rows) + "x" + std::to_string(cols));
      MatrixData data = random_matrix(spec, rows * cols, rng);
      const F64Reference expected = f64_formulas(ema, nesterov, data.g32, data.momentum, data.p32, 0.95, 0.03, 0.999, rows, cols, program);
      runtime::OrthogonalizeOptions options;
      options.strategy = "standard";
      options.backend = "ref";
      options.precision = ScalarType::F64;
      options.muon_step = spec;
      runtime::compile_orthogonalizer(program, 1, rows, cols, options)->run_muon_step({pointers(data, 0.95, 0.03, 0.999)}, nullptr);
      EXPECT_EQ(data.momentum, expected.momentum);
      double worst = 0;
      for (size_t i = 0; i < data.p32.size(); ++i) {
        // one f32 ulp of O (|O| < 1) times the step, plus one f32 ulp of p
        const double bound = 0.03 * std::ldexp(1.0, -23) + std::ldexp(std::fabs(expected.param[i]), -23);
        worst = std::max(worst, std::fabs(static_cast<double>(data.p32[i]) - expected.param[i]) / bound);
      }
      EXPECT_LE(worst, 1.0);
    }
}

TEST(MuonStep, WrongMatrixCountAndOrthogonalizerCallsAreRefused) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  runtime::OrthogonalizeOptions options;
  options.backend = "ref";
  options.strategy = "standard";
  options.muon_step = MuonStepSpec{};
  auto step = runtime::compile_orthogonalizer(program, 2, 8, 16, options);
  std::vector<float> g(128), m(128), p(128);
  MuonStepMatrix io;
  io.grad = reinterpret_cast<std::uintptr_t>(g.data());
  io.momentum = reinterpret_cast<std::uintptr_t>(m.data());
  io.param = reinterpret_cast<std::uintptr_t>(p.data());
  EXPECT_THROW(step->run_muon_step({io}, nullptr), std::invalid_argument);  // compiled for 2
  EXPECT_THROW(step->run(g.data(), p.data()), std::invalid_argument);
  options.muon_step = MuonStepSpec{true, true, ScalarType::F64, ScalarType::F32};
  EXPECT_THROW(runtime::compile_orthogonalizer(program, 1, 8, 16, options), runtime::UsageError);
}

// The step's gradient reads (runtime/muon/update_rules.h) against the per-element definitions:
// widen_to_f32 is load_element rounded to f32 for every storage type, over more elements than one
// chunk of the pool; first_nonfinite finds the first NaN or infinity wherever it is (in the
// first and a later block, as the last element, in a negative infinity and a NaN with payload)
// and -1 for all finite values (the largest finite and the subnormals included).
TEST(MuonStepRules, GradientReadsMatchTheElementDefinitions) {
  std::mt19937_64 random(std::random_device{}());
  const int64_t count = (int64_t{1} << 15) * 2 + 77;  // three chunks of the pool, a partial last one
  for (runtime::DType type : {runtime::DType::BF16, runtime::DType::F16, runtime::DType::F32}) {
    const size_t bytes = static_cast<size_t>(count) * runtime::dtype_bytes(type);
    std::vector<unsigned char> data(bytes);
    for (auto& b : data) b = static_cast<unsigned char>(random());
    // Finite values only: exponent fields below all ones (bit patterns of each width).
    for (int64_t i = 0; i < count; ++i) {
      double v = std::ldexp(std::normal_distribution<double>()(random), static_cast<int>(random() % 20) - 10);
      if (i == 5) v = type == runtime::DType::F16 ? 65504.0 : 3.0e38;  // the largest finite region
      if (i == 6) v = 1e-7;                                             // an f16 subnormal
      runtime::store_element(type, data.data(), i, type == runtime::DType::F16 && std::fabs(v) > 65504 ? 1.0 : v);
    }
    std::vector<float> widened(static_cast<size_t>(count), std::nanf(""));
    runtime::widen_to_f32(type, data.data(), count, widened.data());
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(widened[static_cast<size_t>(i)]), std::bit_cast<uint32_t>(static_cast<float>(runtime::load_element(type, data.data(), i))))
          << runtime::to_string(type) << " element " << i;
    EXPECT_EQ(runtime::first_nonfinite(type, data.data(), count), -1) << runtime::to_string(type);
    for (int64_t at : {int64_t{0}, int64_t{4100}, count - 1}) {
      std::vector<unsigned char> copy = data;
      const double bad = at == 0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
      runtime::store_element(type, copy.data(), at, bad);
      if (at == count - 1) runtime::store_element(type, copy.data(), count - 2, std::numeric_limits<double>::infinity());  // an earlier one wins
      EXPECT_EQ(runtime::first_nonfinite(type, copy.data(), count), at == count - 1 ? count - 2 : at) << runtime::to_string(type) << " at " << at;
    }
  }
}

}  // namespace
}  // namespace orthojit
