// The generated CUDA of a Muon step (compiler/ir/muon_step.h; cuda_codegen.cpp: the momentum in
// both normalize kernels, the update in the last product's or lincomb's epilogue) run in the host
// emulation (tests/cuda_host_emulator.h), and compiled by NVRTC for sm_80 and sm_90 with ptxas's
// report checked.
//
// The reference is the orthogonalizer of the same shape and strategy, generated and emulated
// separately, run on U from the momentum formulas: the fused step must give the same bits, for
// the momentum (the f64 formulas in the same order) and for the parameter (p·decay − step·O
// rounded once, O the orthogonalizer's output), because it reads the same U values and runs the
// same kernels in between. Cases: standard wide, tall (oriented: M and p addressed through the
// transpose), gram, a last X made by a three-term lincomb, bf16 and f16 gradients, f32, bf16 and
// f16 parameters, batches with per-matrix pointers and scalars. Each case runs on the variants
// that compile Muon steps: the per-op kernels (the step is their launches less the output pass),
// the fused small-matrix kernel (the whole step in one launch, one CTA per matrix), and the per-op
// kernels with the products on the sm_90a tile, where the update is not fused
// (CudaVariant::fuses_muon_update) but runs as its own pass in place of the output pass, so that
// the last X's product stays on the tile.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <random>
#include <set>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_codegen.h"
#include "cuda/fused_small_codegen.h"
#include "cuda/nvrtc_compiler.h"
#include "cuda_host_emulator.h"
#include "dsl/parser.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"

namespace orthojit::cuda {
namespace {

using emulation::HostEmulator;

struct Case {
  std::string name;
  dsl::Program program;
  int64_t rows, cols, batch;
  ir::StrategyKind strategy;
  ir::MuonStepSpec spec;
};

// The last X as a sum of three terms (a·X + b·A·X + c·A·A·X): fuse_epilogues keeps a lincomb.
dsl::Program three_term_program() {
  return dsl::parse_program(
      "orthogonalizer three_terms {\n  precision { storage = bf16; accumulate = f32; norm = f32; }\n"
      "  normalize frobenius(safety = 1.0, eps = 1e-7);\n  coefficients jordan repeat 3;\n"
      "  step {\n    A = X @ X.T;\n    Y = A @ X;\n    X = a * X + b * Y + c * A @ Y;\n  }\n}\n");
}

std::vector<Case> cases() {
  const dsl::Program jordan = kernels::load_program_by_name_or_path("jordan_ns5");
  const dsl::Program gram = kernels::load_program_by_name_or_path("gram_polar_express5");
  return {
      {"standard_wide", jordan, 48, 80, 2, ir::StrategyKind::Standard, {true, true, ScalarType::BF16, ScalarType::BF16}},
      {"standard_tall", jordan, 80, 48, 2, ir::StrategyKind::Standard, {false, true, ScalarType::F32, ScalarType::F16}},
      {"gram", gram, 40, 136, 1, ir::StrategyKind::Gram, {true, false, ScalarType::F16, ScalarType::F32}},
      {"lincomb_last", three_term_program(), 36, 52, 1, ir::StrategyKind::Standard, {false, false, ScalarType::BF16, ScalarType::F32}},
  };
}

ir::Function schedule(const Case& c, bool muon_step, bool fuse_update = true) {
  passes::CompileOptions options;
  options.fuse_update = fuse_update;
  options.rows = c.rows;
  options.cols = c.cols;
  options.batch = c.batch;
  options.strategy = c.strategy;
  if (muon_step) options.muon_step = c.spec;
  return passes::compile_program(c.program, options);
}

std::filesystem::path scratch(const std::string& name) {
  return std::filesystem::path(::testing::TempDir()) / ("orthojit_muon_emulation_" + std::to_string(::getpid()) + "_" + name);
}

size_t bytes_of(ScalarType type) { return type == ScalarType::F32 ? 4 : 2; }

enum class Variant { PerOp, FusedSmall, Hopper };

// The runtime's variant for each, which decides whether the step fuses its update.
CudaVariant runtime_variant(Variant variant) {
  CudaVariant runtime;
  if (variant == Variant::FusedSmall) runtime.kind = CudaVariant::Kind::FusedSmall;
  runtime.hopper = variant == Variant::Hopper;
  return runtime;
}

CudaProgram generate(const ir::Function& function, Variant variant) {
  if (variant == Variant::FusedSmall) return generate_fused_small_cuda(function);
  CodegenOptions options;
  options.hopper_products = variant == Variant::Hopper;
  return generate_cuda(function, options);
}

// The products of `program` on the sm_90a tile, and whether the last X's product is one of them.
struct TileUse {
  int products = 0, on_tile = 0;
  bool last_product_on_tile = false;
};
TileUse tile_use(const CudaProgram& program) {
  TileUse use;
  for (const Launch& launch : program.launches)
    if (launch.product >= 0) {
      ++use.products;
      use.on_tile += launch.hopper_tile();
      use.last_product_on_tile = launch.hopper_tile();
    }
  return use;
}

class CudaMuonStepVariant : public ::testing::TestWithParam<Variant> {};

TEST_P(CudaMuonStepVariant, FusedStepIsTheSeparateRulesBitForBitInTheEmulation) {
  if (!emulation::host_compiler_available()) GTEST_SKIP() << "no host c++ compiler for the emulation";
  const Variant variant = GetParam();
  std::mt19937 rng(1201);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name + ": " + c.spec.describe());
    const bool fuse_update = runtime_variant(variant).fuses_muon_update();
    EXPECT_EQ(fuse_update, variant != Variant::Hopper);
    const ir::Function step_function = schedule(c, true, fuse_update), plain_function = schedule(c, false);
    if (variant == Variant::FusedSmall) {
      ASSERT_EQ(fused_small_ineligible_reason(step_function), "");
    }
    const CudaProgram step = generate(step_function, variant), plain = generate(plain_function, variant);
    EXPECT_TRUE(step.muon_step);
    if (variant == Variant::Hopper) {
      // The orthogonalizer's launches with the output pass replaced by the update pass, the
      // products on the tile as in the orthogonalizer: the last X's too, where the tile takes it.
      ASSERT_EQ(step.launches.size(), plain.launches.size());
      EXPECT_EQ(step.launches.back().kernel.rfind("update_", 0), 0u) << step.launches.back().kernel;
      EXPECT_EQ(plain.launches.back().kernel.rfind("output_", 0), 0u) << plain.launches.back().kernel;
      const TileUse step_use = tile_use(step), plain_use = tile_use(plain);
      EXPECT_EQ(step_use.on_tile, plain_use.on_tile);
      EXPECT_EQ(step_use.last_product_on_tile, plain_use.last_product_on_tile);
      if (c.name == "standard_wide") {
        EXPECT_EQ(step_use.on_tile, step_use.products) << "bf16, 16-byte aligned rows: every product on the tile, the last X's included";
      }
    } else if (variant == Variant::PerOp) {
      // One Muon step is the orthogonalizer's launches less its output pass: nothing else.
      EXPECT_EQ(step.launches.size() + 1, plain.launches.size());
      for (const Launch& launch : step.launches)
        EXPECT_TRUE(launch.kernel.rfind("normalize_", 0) == 0 || launch.kernel.rfind("gemm_", 0) == 0 || launch.kernel.rfind("lincomb_", 0) == 0)
            << launch.kernel;
    } else {
      // The whole step of every matrix is one launch, its arguments the step's block alone.
      ASSERT_EQ(step.launches.size(), 1u);
      EXPECT_EQ(step.launches[0].args.front().kind, Slot::Kind::StepArgs);
      for (size_t k = 1; k < step.launches[0].args.size(); ++k) EXPECT_EQ(step.launches[0].args[k].kind, Slot::Kind::Buffer);
    }

    const int64_t elements = c.rows * c.cols;
    std::vector<std::vector<unsigned char>> grads, params, expected_params;
    std::vector<std::vector<float>> momenta, expected_momenta;
    std::vector<ir::MuonStepMatrix> matrices;
    std::vector<float> update(static_cast<size_t>(elements * c.batch));
    for (int64_t z = 0; z < c.batch; ++z) {
      std::vector<unsigned char> g(static_cast<size_t>(elements) * bytes_of(c.spec.grad)), p(static_cast<size_t>(elements) * bytes_of(c.spec.param));
      std::vector<float> m(static_cast<size_t>(elements));
      for (int64_t i = 0; i < elements; ++i) {
        ir::store_rounded(c.spec.grad, g.data(), i, 1e-2 * normal(rng));
        ir::store_rounded(c.spec.param, p.data(), i, 0.5 * normal(rng));
        m[static_cast<size_t>(i)] = static_cast<float>(1e-2 * normal(rng));
      }
      const double beta = 0.9 + 0.05 * static_cast<double>(z), step_size = 0.02 + 0.01 * static_cast<double>(z), decay = 1.0 - 1e-3 * static_cast<double>(z);
      std::vector<float> m_expected = m;
      for (int64_t i = 0; i < elements; ++i) {  // the momentum formulas, as the host rules compute them
        const double gi = static_cast<float>(ir::load_stored(c.spec.grad, g.data(), i));
        const float next = ir::muon_momentum_next(c.spec.ema, beta, gi, m_expected[static_cast<size_t>(i)]);
        m_expected[static_cast<size_t>(i)] = next;
        update[static_cast<size_t>(z * elements + i)] = ir::muon_update_value(c.spec.ema, c.spec.nesterov, beta, gi, next);
      }
      grads.push_back(std::move(g));
      params.push_back(p);
      expected_params.push_back(std::move(p));
      momenta.push_back(std::move(m));
      expected_momenta.push_back(std::move(m_expected));
      ir::MuonStepMatrix io;
      io.beta = beta;
      io.step = step_size;
      io.decay = decay;
      matrices.push_back(io);
    }
    for (int64_t z = 0; z < c.batch; ++z) {  // pointers only now: the vectors no longer move
      matrices[z].grad = reinterpret_cast<std::uintptr_t>(grads[z].data());
      matrices[z].momentum = reinterpret_cast<std::uintptr_t>(momenta[z].data());
      matrices[z].param = reinterpret_cast<std::uintptr_t>(params[z].data());
    }

    const std::string tag = c.name + (variant == Variant::PerOp ? "" : variant == Variant::FusedSmall ? "_fused" : "_hopper");
    HostEmulator plain_emulator(plain, scratch(tag + "_plain"));
    const HostEmulator::Result orthogonal = plain_emulator.run(update);
    EXPECT_EQ(orthogonal.memory_errors, "");
    for (int64_t z = 0; z < c.batch; ++z)
      for (int64_t i = 0; i < elements; ++i)
        ir::store_rounded(c.spec.param, expected_params[z].data(), i,
                          ir::muon_parameter_next(ir::load_stored(c.spec.param, expected_params[z].data(), i), matrices[z].decay, matrices[z].step,
                                                  orthogonal.output[static_cast<size_t>(z * elements + i)]));

    HostEmulator step_emulator(step, scratch(tag + "_step"));
    step_emulator.set_step_arguments(ir::pack_muon_step_arguments(matrices));
    const HostEmulator::Result result = step_emulator.run(std::vector<float>(static_cast<size_t>(elements * c.batch), 0.0f));
    EXPECT_EQ(result.memory_errors, "");
    for (int64_t z = 0; z < c.batch; ++z) {
      EXPECT_EQ(momenta[z], expected_momenta[z]) << "momentum of matrix " << z;
      int64_t differing = 0, first = -1;
      for (int64_t i = 0; i < elements; ++i) {
        const size_t at = static_cast<size_t>(i) * bytes_of(c.spec.param);
        if (std::memcmp(params[z].data() + at, expected_params[z].data() + at, bytes_of(c.spec.param)) != 0 && differing++ == 0) first = i;
      }
      EXPECT_EQ(differing, 0) << "parameter of matrix " << z << ": first differing element " << first << " (row " << first / std::max<int64_t>(1, c.cols)
                              << ")";
    }
  }
}

TEST_P(CudaMuonStepVariant, GeneratedStepsCompileForSm80AndSm90WithoutSpills) {
  for (const Case& c : cases()) {
    const Variant variant = GetParam();
    const CudaProgram program = generate(schedule(c, true, runtime_variant(variant).fuses_muon_update()), variant);
    std::set<std::string> kernels;
    for (const Launch& launch : program.launches) kernels.insert(launch.kernel);
    const std::vector<const char*> arches = variant == Variant::Hopper ? std::vector<const char*>{"sm_90a"} : std::vector<const char*>{"sm_80", "sm_90"};
    for (const char* arch : arches) {
      SCOPED_TRACE(c.name + " " + arch);
      const NvrtcOutput output = compile_cuda(program.source, kernels::cuda_device_headers(), arch);
      EXPECT_FALSE(output.image.empty());
      EXPECT_EQ(output.resources.size(), kernels.size()) << output.log;
      for (const Launch& launch : program.launches) {
        auto found = output.resources.find(launch.kernel);
        ASSERT_NE(found, output.resources.end()) << launch.kernel << "\n" << output.log;
        EXPECT_EQ(found->second.spill_store_bytes, 0) << launch.summary;
        EXPECT_EQ(found->second.spill_load_bytes, 0) << launch.summary;
        EXPECT_LE(found->second.registers * launch.block, 65536) << launch.summary;
      }
      EXPECT_EQ(wgmma_serialization_messages(output), "") << "ptxas serialized the wgmma pipeline";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaMuonStepVariant, ::testing::Values(Variant::PerOp, Variant::FusedSmall, Variant::Hopper),
                         [](const ::testing::TestParamInfo<Variant>& param_info) {
                           return param_info.param == Variant::PerOp ? "PerOp" : param_info.param == Variant::FusedSmall ? "FusedSmall" : "Hopper";
                         });

}  // namespace
}  // namespace orthojit::cuda
