// The first-use probe of generated CUDA kernels (runtime/cuda_first_use_check.h), with the device
// replaced by host runners: one computing what correct kernels compute (the reference interpreter
// at the program's rounding points), one with a single 16x16 tile wrong, one never writing an
// element. Which shape it probes, which kernels it fixes, and that it runs once per kernel choice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"
#include "runtime/cuda_first_use_check.h"

namespace orthojit::runtime {
namespace {

passes::CompileOptions options_for(int64_t rows, int64_t cols, int64_t batch, ir::StrategyKind strategy) {
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  options.strategy = strategy;
  return options;
}

std::vector<float> correct_output(const ir::Function& probe, const std::vector<float>& input) {
  const std::vector<double> output = reference::interpret(probe, std::vector<double>(input.begin(), input.end()));
  return std::vector<float>(output.begin(), output.end());
}

TEST(CudaFirstUseCheck, ProbesASmallShapeOfTheSameOrientation) {
  const cuda::CudaVariant generated;
  passes::CompileOptions wide = options_for(1024, 4096, 8, ir::StrategyKind::Gram);
  wide.muon_step = ir::MuonStepSpec{};
  const passes::CompileOptions probe = probe_options(wide, generated);
  EXPECT_EQ(probe.rows, 200);
  EXPECT_EQ(probe.cols, 264);
  EXPECT_EQ(probe.batch, 2);
  EXPECT_EQ(probe.strategy, ir::StrategyKind::Gram);
  EXPECT_FALSE(probe.muon_step.has_value());
  const passes::CompileOptions tall = probe_options(options_for(4096, 1024, 1, ir::StrategyKind::Standard), generated);
  EXPECT_EQ(tall.rows, 264);
  EXPECT_EQ(tall.cols, 200);
  const passes::CompileOptions small = probe_options(options_for(72, 136, 1, ir::StrategyKind::Standard), generated);
  EXPECT_EQ(small.rows, 72);
  EXPECT_EQ(small.cols, 136);
  // The fused small-matrix kernel holds the m x m values of its own rows: the real rows.
  const passes::CompileOptions heads = probe_options(options_for(128, 2048, 32, ir::StrategyKind::Gram), {cuda::CudaVariant::Kind::FusedSmall, std::nullopt});
  EXPECT_EQ(heads.rows, 128);
  EXPECT_EQ(heads.cols, 2048);
  EXPECT_EQ(heads.batch, 2);
}

TEST(CudaFirstUseCheck, TheProbeRunsEachProductOnTheRealShapesKernel) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  for (const bool hopper : {false, true}) {
    const passes::CompileOptions real_options = options_for(1024, 4096, 1, ir::StrategyKind::Standard);
    const ir::Function real_function = passes::compile_program(program, real_options);
    cuda::CudaVariant variant;
    variant.hopper = hopper;
    const cuda::CudaProgram real = cuda::generate_variant(real_function, variant, 227 * 1024, 132);
    const ir::Function probe = passes::compile_program(program, probe_options(real_options, variant));
    const cuda::CudaVariant fixed = probe_variant(real, probe, variant);
    int products = 0;
    for (const cuda::Launch& launch : real.launches) {
      if (launch.product < 0) continue;
      ++products;
      ASSERT_LT(static_cast<size_t>(launch.product), fixed.product_tiles.size());
      ASSERT_TRUE(fixed.product_tiles[static_cast<size_t>(launch.product)].has_value());
      EXPECT_EQ(fixed.product_tiles[static_cast<size_t>(launch.product)]->label(), launch.tile.label()) << launch.summary;
      EXPECT_EQ(fixed.product_tiles[static_cast<size_t>(launch.product)]->sm90a, hopper) << launch.summary;
    }
    EXPECT_EQ(products, 15);  // three products per step
    // The probe's program really runs those kernels at its shape.
    const cuda::CudaProgram probe_program = cuda::generate_variant(probe, fixed, 227 * 1024, 132);
    for (const cuda::Launch& launch : probe_program.launches) {
      if (launch.product >= 0) {
        EXPECT_EQ(launch.tile.label(), fixed.product_tiles[static_cast<size_t>(launch.product)]->label());
      }
    }
  }
}

// A split-K product keeps its splits where the probe's K has a K tile for each, else runs unsplit.
TEST(CudaFirstUseCheck, SplitKProductsKeepTheirSplitsWhereTheProbesKAllows) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const passes::CompileOptions real_options = options_for(1024, 4096, 1, ir::StrategyKind::Gram);
  const ir::Function real_function = passes::compile_program(program, real_options);
  const cuda::CudaProgram real = cuda::generate_variant(real_function, cuda::CudaVariant{}, 227 * 1024, 132);
  // The real program as the tuner might choose it: product 0 (R = X·Xᵀ, K = 4096) in 16 splits,
  // product 1 (K = 1024) in 2; the probe's K: 264 for the first (5 K tiles of 64: 16 splits
  // cannot all get one), 200 for the second (4 tiles: 2 splits can).
  cuda::CudaProgram tuned = real;
  for (cuda::Launch& launch : tuned.launches) {
    if (launch.product == 0) launch.tile = cuda::sm90a_tile(16);
    if (launch.product == 1) launch.tile = cuda::sm90a_tile(2);
  }
  const ir::Function probe = passes::compile_program(program, probe_options(real_options, cuda::CudaVariant{}));
  const cuda::CudaVariant fixed = probe_variant(tuned, probe, cuda::CudaVariant{});
  ASSERT_TRUE(fixed.product_tiles[0].has_value() && fixed.product_tiles[1].has_value());
  EXPECT_TRUE(fixed.product_tiles[0]->sm90a);
  EXPECT_EQ(fixed.product_tiles[0]->splits, 1);
  EXPECT_EQ(fixed.product_tiles[1]->splits, 2);
}

TEST(CudaFirstUseCheck, PassesCorrectKernelsRefusesAWrongTileAndRunsOnce) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const passes::CompileOptions real_options = options_for(1024, 4096, 1, ir::StrategyKind::Gram);
  const ir::Function real_function = passes::compile_program(program, real_options);
  const cuda::CudaVariant variant;
  const cuda::CudaProgram real = cuda::generate_variant(real_function, variant, 227 * 1024, 132);
  int runs = 0;
  const CudaFirstUseCheck good = check_cuda_variant_on_first_use(program, real_options, real, variant,
                                                                 [&](const ir::Function& probe, const cuda::CudaVariant& kernels, const std::vector<float>& input) {
                                                                   ++runs;
                                                                   EXPECT_FALSE(kernels.product_tiles.empty());
                                                                   return correct_output(probe, input);
                                                                 });
  EXPECT_TRUE(good.ran);
  EXPECT_TRUE(good.passed) << good.detail;
  EXPECT_NE(good.detail.find("probe jordan_ns5 200x264x1 gram"), std::string::npos) << good.detail;
  // The same program and kernels again: the first result, no second run.
  const CudaFirstUseCheck again = check_cuda_variant_on_first_use(program, real_options, real, variant,
                                                                  [&](const ir::Function& probe, const cuda::CudaVariant&, const std::vector<float>& input) {
                                                                    ++runs;
                                                                    return correct_output(probe, input);
                                                                  });
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(again.passed);

  // Another program (the standard strategy) with one 16x16 tile off by 0.05: refused, and the
  // detail says where.
  const passes::CompileOptions standard_options = options_for(1024, 4096, 1, ir::StrategyKind::Standard);
  const cuda::CudaProgram standard = cuda::generate_variant(passes::compile_program(program, standard_options), variant, 227 * 1024, 132);
  const CudaFirstUseCheck bad_tile = check_cuda_variant_on_first_use(
      program, standard_options, standard, variant, [&](const ir::Function& probe, const cuda::CudaVariant&, const std::vector<float>& input) {
        std::vector<float> output = correct_output(probe, input);
        for (int64_t i = 32; i < 48; ++i)
          for (int64_t j = 240; j < 256; ++j) output[static_cast<size_t>(i * 264 + j)] += 0.05f;
        return output;
      });
  EXPECT_TRUE(bad_tile.ran);
  EXPECT_FALSE(bad_tile.passed);
  EXPECT_NE(bad_tile.detail.find("against the f64 reference"), std::string::npos) << bad_tile.detail;

  // An element never written (NaN, as the device's poisoned buffers would show it): refused.
  const passes::CompileOptions batch_options = options_for(1024, 4096, 3, ir::StrategyKind::Standard);
  const cuda::CudaProgram batched = cuda::generate_variant(passes::compile_program(program, batch_options), variant, 227 * 1024, 132);
  const CudaFirstUseCheck unwritten = check_cuda_variant_on_first_use(
      program, batch_options, batched, variant, [&](const ir::Function& probe, const cuda::CudaVariant&, const std::vector<float>& input) {
        std::vector<float> output = correct_output(probe, input);
        output.back() = std::nanf("");
        return output;
      });
  EXPECT_FALSE(unwritten.passed);
  EXPECT_NE(unwritten.detail.find("non-finite or unwritten"), std::string::npos) << unwritten.detail;
}

TEST(CudaFirstUseCheck, VendorVariantsAndTheSwitchSkipIt) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const passes::CompileOptions options = options_for(512, 1024, 1, ir::StrategyKind::Standard);
  auto never = [](const ir::Function&, const cuda::CudaVariant&, const std::vector<float>&) -> std::vector<float> {
    ADD_FAILURE() << "the probe ran";
    return {};
  };
  const CudaFirstUseCheck vendor = check_cuda_variant_on_first_use(program, options, {}, {cuda::CudaVariant::Kind::Cublaslt, std::nullopt}, never);
  EXPECT_FALSE(vendor.ran);
  EXPECT_TRUE(vendor.passed);
  setenv("ORTHOJIT_CUDA_FIRST_USE_CHECK", "off", 1);
  const CudaFirstUseCheck off = check_cuda_variant_on_first_use(program, options, {}, {}, never);
  unsetenv("ORTHOJIT_CUDA_FIRST_USE_CHECK");
  EXPECT_FALSE(off.ran);
  EXPECT_NE(off.detail.find("ORTHOJIT_CUDA_FIRST_USE_CHECK=off"), std::string::npos);
}

}  // namespace
}  // namespace orthojit::runtime
