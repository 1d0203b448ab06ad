// ORTHOJIT_CUDA_SM90A=off (cuda/sm90a_switch.h) without a GPU: no choice that could run the sm_90a
// tile survives it, and each refusal names the switch. The variant check that build_cuda_runner
// and the tuner's pruning ask, the tuner's candidate list on a CC 9.0 device, its per-product
// search, the tile alone, and `orthojit info`; every one also checked with the switch on, so that
// the test sees the tile where it would otherwise be.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "autotune/cuda_search_space.h"
#include "autotune/cuda_tile_search.h"
#include "cli/commands.h"
#include "cuda/cuda_backend.h"
#include "cuda/hopper_product.h"
#include "cuda/sm90a_switch.h"
#include "kernels/program_library.h"
#include "runtime/records.h"
#include "test_support.h"

namespace orthojit {
namespace {

// Sets ORTHOJIT_CUDA_SM90A for one test (unset for nullptr) and puts back what was there.
class Sm90aSwitch {
 public:
  explicit Sm90aSwitch(const char* value) {
    if (const char* before = std::getenv(kName)) before_ = before;
    if (value) ::setenv(kName, value, 1);
    else ::unsetenv(kName);
  }
  ~Sm90aSwitch() {
    if (before_) ::setenv(kName, before_->c_str(), 1);
    else ::unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "ORTHOJIT_CUDA_SM90A";
  std::optional<std::string> before_;
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Gram at 1024x4096 bf16: every product can run on the tile (tests/cuda_tile_search_test.cpp).
ir::Function wide_gram() {
  return testing::compile(kernels::load_program_by_name_or_path("jordan_ns5"), 1024, 4096, ir::StrategyKind::Gram, ScalarType::BF16, 1);
}

TEST(CudaSm90aSwitch, ReadsTheVariable) {
  {
    Sm90aSwitch unset(nullptr);
    EXPECT_EQ(cuda::sm90a_disabled_reason(), "");
  }
  {
    Sm90aSwitch on("on");
    EXPECT_EQ(cuda::sm90a_disabled_reason(), "");
  }
  {
    Sm90aSwitch off("off");
    EXPECT_EQ(cuda::sm90a_disabled_reason(), "ORTHOJIT_CUDA_SM90A=off");
  }
  {
    // A value other than on or off turns the tile off too (a misspelt "off" must not leave it in).
    Sm90aSwitch misspelt("0ff");
    EXPECT_TRUE(contains(cuda::sm90a_disabled_reason(), "ORTHOJIT_CUDA_SM90A=0ff")) << cuda::sm90a_disabled_reason();
  }
}

TEST(CudaSm90aSwitch, EveryVariantOnTheTileIsRefusedSayingWhy) {
  const ir::Function gram = wide_gram();
  cuda::CudaVariant uniform_tile;  // a uniform sm_90a tile, set as code can set it (no label parses to it)
  uniform_tile.tile = cuda::sm90a_tile();
  const cuda::CudaVariant on_tile[] = {cuda::CudaVariant::parse("generated hopper"), cuda::CudaVariant::parse("generated per-product sm90a,-"),
                                       cuda::CudaVariant::parse("generated per-product -,sm90a/n256"), cuda::CudaVariant::parse("generated hopper 64x64x32/2x2"),
                                       uniform_tile};
  for (const cuda::CudaVariant& variant : on_tile) {
    EXPECT_TRUE(variant.needs_sm90a()) << variant.label();
    {
      Sm90aSwitch on(nullptr);
      EXPECT_EQ(cuda::variant_switched_off_reason(variant), "") << variant.label();
      EXPECT_EQ(cuda::variant_unavailable_reason(gram, variant, 227 * 1024), "") << variant.label();
    }
    Sm90aSwitch off("off");
    const std::string why = cuda::variant_unavailable_reason(gram, variant, 227 * 1024);
    EXPECT_TRUE(contains(why, "ORTHOJIT_CUDA_SM90A=off")) << variant.label() << ": " << why;
    EXPECT_TRUE(contains(why, "sm_90a tile")) << why;
    EXPECT_EQ(cuda::variant_switched_off_reason(variant), why);
  }
  // The other variants are untouched.
  Sm90aSwitch off("off");
  for (const char* label : {"generated", "generated 128x128x32/2x4", "generated per-product 64x64x32/2x2,-", "cublaslt"}) {
    const cuda::CudaVariant variant = cuda::CudaVariant::parse(label);
    EXPECT_EQ(cuda::variant_switched_off_reason(variant), "") << label;
    EXPECT_FALSE(contains(cuda::variant_unavailable_reason(gram, variant, 227 * 1024), "ORTHOJIT_CUDA_SM90A")) << label;
  }
}

// The tuner's candidates on a CC 9.0 device: with the switch off, none that needs the tile
// survives the pruning, and each pruned one says why.
TEST(CudaSm90aSwitch, TheTunerPrunesTheTileSayingWhy) {
  const ir::Function gram = wide_gram();
  const autotune::CudaSearchSpace& space = autotune::cuda_search_space();
  ASSERT_TRUE(space.hopper);
  auto surviving_on_tile = [&] {
    int surviving = 0, pruned_for_switch = 0;
    for (const autotune::CudaCandidate& candidate : autotune::cuda_candidates(space, {ir::StrategyKind::Gram, "generated"})) {
      if (candidate.strategy != ir::StrategyKind::Gram) continue;
      const std::optional<std::string> pruned = autotune::cuda_prune_reason(candidate, &gram, "", 227 * 1024, 90);
      if (!cuda::CudaVariant::parse(candidate.variant).needs_sm90a()) continue;
      if (!pruned) ++surviving;
      else if (contains(*pruned, "ORTHOJIT_CUDA_SM90A=off")) ++pruned_for_switch;
      else ADD_FAILURE() << candidate.label() << " pruned for another reason: " << *pruned;
    }
    return std::make_pair(surviving, pruned_for_switch);
  };
  {
    Sm90aSwitch on(nullptr);
    EXPECT_EQ(surviving_on_tile(), std::make_pair(1, 0)) << "generated hopper runs on a CC 9.0 device";
  }
  Sm90aSwitch off("off");
  EXPECT_EQ(surviving_on_tile(), std::make_pair(0, 1));
}

// The per-product search (round one, and the classes' candidates round two draws from) offers
// no sm_90a tile with the switch off.
TEST(CudaSm90aSwitch, ThePerProductSearchOffersNoTile) {
  const ir::Function gram = wide_gram();
  autotune::CudaSearchSpace space = autotune::cuda_search_space();
  space.hopper = true;  // as the tuner leaves it on a CC 9.0 device
  auto on_tile = [&] {
    int count = 0;
    for (const autotune::CudaCandidate& candidate : autotune::product_tile_candidates(space, ir::StrategyKind::Gram, gram, 132))
      count += cuda::CudaVariant::parse(candidate.variant).needs_sm90a();
    return count;
  };
  {
    Sm90aSwitch on(nullptr);
    EXPECT_GT(on_tile(), 0);
  }
  Sm90aSwitch off("off");
  EXPECT_EQ(on_tile(), 0);
}

TEST(CudaSm90aSwitch, TheTileAloneIsRefusedSayingWhy) {
  const cuda::HopperProductSpec spec{false, ScalarType::BF16, false, false};
  {
    Sm90aSwitch on(nullptr);
    EXPECT_EQ(cuda::hopper_product_unsupported_reason(spec, 1024, 1024, 1024, 90), "");
  }
  Sm90aSwitch off("off");
  EXPECT_TRUE(contains(cuda::hopper_product_unsupported_reason(spec, 1024, 1024, 1024, 90), "ORTHOJIT_CUDA_SM90A=off"));
}

TEST(CudaSm90aSwitch, InfoSaysSo) {
  {
    Sm90aSwitch on(nullptr);
    EXPECT_FALSE(runtime::info_record().at("cuda").contains("sm90a_off"));
    ::testing::internal::CaptureStdout();
    cli::info_command({});
    EXPECT_FALSE(contains(::testing::internal::GetCapturedStdout(), "ORTHOJIT_CUDA_SM90A"));
  }
  Sm90aSwitch off("off");
  EXPECT_EQ(runtime::info_record().at("cuda").value("sm90a_off", ""), "ORTHOJIT_CUDA_SM90A=off");
  ::testing::internal::CaptureStdout();
  cli::info_command({});
  EXPECT_TRUE(contains(::testing::internal::GetCapturedStdout(), "sm_90a:     off (ORTHOJIT_CUDA_SM90A=off)"));
}

}  // namespace
}  // namespace orthojit
