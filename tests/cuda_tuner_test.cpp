// The CUDA backend's host side, without a GPU: the search space and its pruning (with reasons),
// candidates and variants round-tripping through their labels and JSON, and the clean refusal
// when there is no driver.
#include <gtest/gtest.h>

#include <set>

#include "autotune/cuda_search_space.h"
#include "cuda/cublaslt_newton_schulz.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_driver.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "test_support.h"

namespace orthojit::autotune {
namespace {

ir::Function schedule(const char* program, int64_t rows, int64_t cols, int64_t batch, ir::StrategyKind strategy, ScalarType precision) {
  return testing::compile(kernels::load_program_by_name_or_path(program), rows, cols, strategy, precision, batch);
}

TEST(CudaSearchSpace, EmbeddedSpaceParsesAndEveryTileIsValid) {
  const CudaSearchSpace& space = cuda_search_space();
  EXPECT_EQ(space.strategies, (std::vector<ir::StrategyKind>{ir::StrategyKind::Standard, ir::StrategyKind::Gram}));
  ASSERT_FALSE(space.tiles.empty());
  for (const auto& tile : space.tiles) EXPECT_EQ(tile.invalid_reason(), "") << tile.label();
  EXPECT_TRUE(space.fused_small);
  EXPECT_TRUE(space.cublas);
  EXPECT_TRUE(space.cublaslt);
}

TEST(CudaSearchSpace, BadDocumentsAreRejectedWithTheReason) {
  nlohmann::json document = {{"backend", "cuda"}, {"strategies", {"standard"}}, {"tiles", {{128, 128, 24, 2, 4}}}};
  try {
    parse_cuda_search_space(document);
    FAIL() << "a BK of 24 was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("BK must be a multiple of 16"), std::string::npos) << error.what();
  }
  document["tiles"] = {{128, 128, 32, 2}};
  EXPECT_THROW(parse_cuda_search_space(document), std::invalid_argument);
  document["tiles"] = nlohmann::json::array();
  document["strategies"] = {"newton"};
  EXPECT_THROW(parse_cuda_search_space(document), std::invalid_argument);
}

TEST(CudaSearchSpace, DefaultLeadsAndNoCandidateRepeats) {
  const CudaSearchSpace& space = cuda_search_space();
  const CudaCandidate first{ir::StrategyKind::Gram, "generated"};
  const auto candidates = cuda_candidates(space, first);
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates.front(), first);
  std::set<std::string> labels;
  for (const auto& candidate : candidates) EXPECT_TRUE(labels.insert(candidate.label()).second) << candidate.label() << " twice";
  // strategies x (default tiles + each tile + the sm_90a tile + fused + cublas + cublaslt)
  EXPECT_EQ(candidates.size(), space.strategies.size() * (space.tiles.size() + 5));
  // Everything that costs no or one compile, for every strategy, before the first explicit tile
  // (a short budget reaches the vendor libraries).
  size_t first_tile = candidates.size(), last_cheap = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& variant = candidates[i].variant;
    const bool tile = variant.rfind("generated ", 0) == 0 && variant != "generated hopper";
    if (tile) first_tile = std::min(first_tile, i);
    else last_cheap = i;
  }
  EXPECT_LT(last_cheap, first_tile) << candidates[last_cheap].label() << " after " << candidates[first_tile].label();
}

TEST(CudaSearchSpace, PruningSaysWhy) {
  const ir::Function wide = schedule("jordan_ns5", 512, 2048, 1, ir::StrategyKind::Standard, ScalarType::BF16);
  const ir::Function wide_gram = schedule("jordan_ns5", 512, 2048, 1, ir::StrategyKind::Gram, ScalarType::BF16);
  const ir::Function heads = schedule("jordan_ns5", 64, 512, 8, ir::StrategyKind::Standard, ScalarType::BF16);
  const ir::Function f32 = schedule("jordan_ns5", 64, 512, 1, ir::StrategyKind::Standard, ScalarType::F32);
  const int limit = 227 * 1024;
  auto reason = [&](const CudaCandidate& candidate, const ir::Function& function, const std::string& error = "") {
    return cuda_prune_reason(candidate, &function, error, limit).value_or("");
  };
  EXPECT_EQ(reason({ir::StrategyKind::Standard, "generated"}, wide), "");
  EXPECT_EQ(reason({ir::StrategyKind::Standard, "generated 128x128x32/2x4"}, wide), "");
  EXPECT_NE(reason({ir::StrategyKind::Standard, "fused-small"}, wide).find("512 rows"), std::string::npos);
  EXPECT_EQ(reason({ir::StrategyKind::Standard, "fused-small"}, heads), "");
  EXPECT_NE(reason({ir::StrategyKind::Gram, "cublas"}, wide_gram).find("standard strategy only"), std::string::npos);
  // cuBLASLt runs Gram too: only a missing library or device prunes it.
  EXPECT_EQ(reason({ir::StrategyKind::Gram, "cublaslt"}, wide_gram), cuda::CublasLtNewtonSchulz::unavailable_reason());
  EXPECT_NE(reason({ir::StrategyKind::Standard, "cublaslt"}, f32).find("bf16 or f16"), std::string::npos);
  EXPECT_NE(reason({ir::StrategyKind::Standard, "generated"}, f32).find("bf16 or f16"), std::string::npos);
  // 128x128 tiles on 64-row products: mostly padding.
  EXPECT_NE(reason({ir::StrategyKind::Standard, "generated 128x128x32/2x4"}, heads).find("at least twice"), std::string::npos);
  EXPECT_NE(reason({ir::StrategyKind::Gram, "generated"}, wide_gram, "step 3 is not an odd polynomial").find("cannot compile this program"), std::string::npos);
  // The sm_90a tile: compute capability 9.0 only, and only where a product can use it.
  EXPECT_EQ(reason({ir::StrategyKind::Standard, "generated hopper"}, wide), "");
  EXPECT_EQ(reason({ir::StrategyKind::Gram, "generated hopper"}, wide_gram), "");
  EXPECT_NE(cuda_prune_reason({ir::StrategyKind::Standard, "generated hopper"}, &wide, "", limit, 80).value_or("").find("compute capability 9.0 only (this device: sm_80)"),
            std::string::npos);
  EXPECT_EQ(reason({ir::StrategyKind::Standard, "generated hopper"}, heads), "") << "a batch runs on the tile too";
  const ir::Function f16 = schedule("jordan_ns5", 256, 512, 1, ir::StrategyKind::Standard, ScalarType::F16);
  EXPECT_NE(reason({ir::StrategyKind::Standard, "generated hopper"}, f16).find("no product of this schedule"), std::string::npos);
}

TEST(CudaSearchSpace, CandidatesAndVariantsRoundTrip) {
  for (const auto& candidate : cuda_candidates(cuda_search_space(), {ir::StrategyKind::Standard, "generated"})) {
    EXPECT_EQ(CudaCandidate::from_json(candidate.to_json()), candidate);
    EXPECT_EQ(cuda::CudaVariant::parse(candidate.variant).label(), candidate.variant);
  }
  EXPECT_THROW(CudaCandidate::from_json({{"backend", "cpu"}}), std::invalid_argument);
  EXPECT_THROW(CudaCandidate::from_json({{"backend", "cuda"}, {"strategy", "gram"}, {"variant", "fastest"}}), std::invalid_argument);
  EXPECT_THROW(cuda::CudaVariant::parse("generated 128x128x24/2x4"), std::invalid_argument);
  EXPECT_THROW(cuda::CudaVariant::parse("generated 128x128"), std::invalid_argument);
}

TEST(CudaBackendWithoutDevice, RefusesCleanlyWithTheReason) {
  std::string reason;
  if (cuda::driver(&reason)) GTEST_SKIP() << "this machine has a CUDA driver";
  EXPECT_FALSE(reason.empty());
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const ir::Function function = schedule("jordan_ns5", 64, 256, 1, ir::StrategyKind::Standard, ScalarType::BF16);
  try {
    cuda::build_cuda_runner(program, function, {}, kernels::cuda_device_headers());
    FAIL() << "a runner was built without a driver";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), reason);
  }
}

}  // namespace
}  // namespace orthojit::autotune
