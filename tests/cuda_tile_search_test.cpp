// Per-product tiles without a GPU (autotune/cuda_tile_search.h): the product classes of a
// schedule, the tuner's two rounds of candidates (each class with each tile, then the
// combination of every class's fastest, here with a cost model standing in for the timing), the
// tuning record's round trip of a per-product winner, and its application as the runtime applies
// a tuned variant (CudaVariant::parse then generate_variant): each product's launch carries its
// chosen tile.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include "autotune/cuda_search_space.h"
#include "autotune/cuda_tile_search.h"
#include "autotune/tuning_loop.h"
#include "cuda/cuda_backend.h"
#include "cuda/hopper_codegen.h"
#include "kernels/program_library.h"
#include "test_support.h"

namespace orthojit::autotune {
namespace {

ir::Function gram_schedule(int64_t rows, int64_t cols, int64_t batch = 1) {
  return testing::compile(kernels::load_program_by_name_or_path("jordan_ns5"), rows, cols, ir::StrategyKind::Gram, ScalarType::BF16, batch);
}

// product index -> the tile label its launch runs with.
std::map<int, std::string> launched_tiles(const ir::Function& scheduled, const cuda::CudaVariant& variant) {
  std::map<int, std::string> tiles;
  for (const cuda::Launch& launch : cuda::generate_variant(scheduled, variant).launches)
    if (launch.product >= 0) {
      EXPECT_NE(launch.summary.find("tile " + launch.tile.label()), std::string::npos) << launch.summary;
      tiles[launch.product] = launch.tile.label();
    }
  return tiles;
}

TEST(CudaTileSearch, ClassesGroupTheProductsByShape) {
  const ir::Function gram = gram_schedule(1024, 4096);
  const auto classes = product_classes(gram, {}, 132);
  ASSERT_GE(classes.size(), 3u);  // R = X·Xᵀ (k = 4096), the m x m chain, Q·X
  std::set<int> seen;
  for (const ProductClass& c : classes) {
    for (int product : c.products) EXPECT_TRUE(seen.insert(product).second) << product << " in two classes";
    EXPECT_EQ(c.tile.label(), cuda::default_tile_config(c.m, c.n, c.triangular, 1, 132).label()) << c.label();
  }
  EXPECT_EQ(seen.size(), launched_tiles(gram, {}).size());
  for (size_t i = 1; i < classes.size(); ++i) EXPECT_GE(classes[i - 1].flops(), classes[i].flops());
  // The m x m chain: several products in one class, triangular.
  EXPECT_TRUE(std::any_of(classes.begin(), classes.end(), [](const ProductClass& c) { return c.triangular && c.m == 1024 && c.products.size() > 4; }));
}

TEST(CudaTileSearch, RoundOneVariesOneClassAtATime) {
  const CudaSearchSpace& space = cuda_search_space();
  const ir::Function gram = gram_schedule(1024, 4096);
  const auto classes = product_classes(gram, {}, 132);
  const auto defaults = launched_tiles(gram, {});
  size_t expected = 0;
  for (size_t which = 0; which < classes.size(); ++which) {
    const auto candidates = class_candidates(space, ir::StrategyKind::Gram, classes, which);
    expected += candidates.size();
    EXPECT_FALSE(candidates.empty()) << classes[which].label();
    for (const CudaCandidate& candidate : candidates) {
      const cuda::CudaVariant variant = cuda::CudaVariant::parse(candidate.variant);
      EXPECT_EQ(variant.label(), candidate.variant);
      const auto tiles = launched_tiles(gram, variant);
      for (const auto& [product, label] : tiles) {
        const bool in_class = std::count(classes[which].products.begin(), classes[which].products.end(), product) > 0;
        if (!in_class) {
          EXPECT_EQ(label, defaults.at(product)) << candidate.variant;
        } else {
          EXPECT_NE(label, classes[which].tile.label()) << candidate.variant;
        }
      }
      // Triangular products keep their upper-tile schedule: square tiles only.
      for (const cuda::Launch& launch : cuda::generate_variant(gram, variant).launches)
        if (launch.triangular) {
          EXPECT_EQ(launch.tile.bm, launch.tile.bn) << launch.summary;
        }
    }
  }
  EXPECT_EQ(product_tile_candidates(space, ir::StrategyKind::Gram, gram, 132).size(), expected);
}

// A stand-in for the device: each product costs its m·n·k times a factor of its tile, with one
// tile per class cheaper than the rest (a different one for every class).
struct CostModel {
  const ir::Function& scheduled;
  std::map<std::string, std::string> cheapest;  // class shape "mxnxk" -> tile label
  double cost(const CudaCandidate& candidate) const {
    double total = 0;
    for (const cuda::Launch& launch : cuda::generate_variant(scheduled, cuda::CudaVariant::parse(candidate.variant)).launches) {
      if (launch.product < 0) continue;
      const auto found = cheapest.find(std::to_string(launch.m) + "x" + std::to_string(launch.n) + "x" + std::to_string(launch.k));
      const double factor = found != cheapest.end() && found->second == launch.tile.label() ? 0.5 : 1.0;
      total += factor * static_cast<double>(launch.m * launch.n * launch.k) * 1e-9;
    }
    return total;
  }
};

TEST(CudaTileSearch, RoundTwoCombinesEveryClasssFastestTile) {
  const CudaSearchSpace& space = cuda_search_space();
  const ir::Function gram = gram_schedule(1024, 4096);
  const auto classes = product_classes(gram, {}, 132);
  CostModel model{gram, {}};
  // The first class (most work) wants 128x128x64, every other class 32x32x32.
  for (size_t i = 0; i < classes.size(); ++i)
    model.cheapest[std::to_string(classes[i].m) + "x" + std::to_string(classes[i].n) + "x" + std::to_string(classes[i].k)] = i == 0 ? "128x128x64/2x4" : "32x32x32/1x2";
  int measured_count = 0;
  auto measured = [&](const CudaCandidate& candidate) -> std::optional<double> {
    ++measured_count;
    return model.cost(candidate);
  };
  const double start_ms = model.cost({ir::StrategyKind::Gram, "generated"});
  const auto combined = combined_product_tiles(space, ir::StrategyKind::Gram, gram, start_ms, measured, 132);
  ASSERT_TRUE(combined);
  EXPECT_EQ(measured_count, static_cast<int>(product_tile_candidates(space, ir::StrategyKind::Gram, gram, 132).size()));
  EXPECT_LT(model.cost(*combined), start_ms * 0.6);
  const auto tiles = launched_tiles(gram, cuda::CudaVariant::parse(combined->variant));
  for (size_t i = 0; i < classes.size(); ++i)
    for (int product : classes[i].products) EXPECT_EQ(tiles.at(product), i == 0 ? "128x128x64/2x4" : "32x32x32/1x2") << classes[i].label();

  // One class improving alone is already a round-one candidate: no combination.
  CostModel one{gram, {{std::to_string(classes[0].m) + "x" + std::to_string(classes[0].n) + "x" + std::to_string(classes[0].k), "128x128x64/2x4"}}};
  EXPECT_FALSE(combined_product_tiles(space, ir::StrategyKind::Gram, gram, one.cost({ir::StrategyKind::Gram, "generated"}),
                                      [&](const CudaCandidate& c) -> std::optional<double> { return one.cost(c); }, 132));
  // Failed or unmeasured candidates never win.
  EXPECT_FALSE(combined_product_tiles(space, ir::StrategyKind::Gram, gram, start_ms, [](const CudaCandidate&) { return std::optional<double>(); }, 132));
}

TEST(CudaTileSearch, APerProductWinnerRoundTripsThroughTheRecordAndIsApplied) {
  const ir::Function gram = gram_schedule(512, 2048, 2);
  auto classes = product_classes(gram, {}, 132);
  for (ProductClass& c : classes) c.tile = c.triangular ? cuda::TileConfig{32, 32, 32, 1, 2} : cuda::TileConfig{128, 64, 32, 2, 2};
  const CudaCandidate winner{ir::StrategyKind::Gram, per_product_variant(classes).label()};
  const nlohmann::json config = winner.to_json();
  ASSERT_TRUE(config.contains("product_tiles"));
  EXPECT_EQ(config.at("product_tiles").size(), launched_tiles(gram, {}).size());
  // As the record stores it (text) and lookup_tuned_cuda reads it back.
  const CudaCandidate loaded = CudaCandidate::from_json(nlohmann::json::parse(config.dump(2)));
  EXPECT_EQ(loaded, winner);
  nlohmann::json tampered = config;
  tampered["product_tiles"][0] = "64x64x32/2x2";
  EXPECT_THROW(CudaCandidate::from_json(tampered), std::invalid_argument);
  // A record written before per-product tiles still loads.
  EXPECT_EQ(CudaCandidate::from_json({{"backend", "cuda"}, {"strategy", "gram"}, {"variant", "generated 64x64x32/2x2"}}).variant, "generated 64x64x32/2x2");
  // The runtime parses the winner's variant and generates with it: every launch has its tile,
  // triangular ones stay triangular (symmetric results stay exactly symmetric).
  for (const cuda::Launch& launch : cuda::generate_variant(gram, cuda::CudaVariant::parse(loaded.variant)).launches) {
    if (launch.product < 0) continue;
    EXPECT_NE(launch.summary.find(launch.triangular ? "tile 32x32x32/1x2 triangular" : "tile 128x64x32/2x2"), std::string::npos) << launch.summary;
  }
  // Labels: '-' keeps a product's default; bad items are refused with the valid forms.
  const cuda::CudaVariant partial = cuda::CudaVariant::parse("generated per-product -,32x32x32/1x2");
  ASSERT_EQ(partial.product_tiles.size(), 2u);
  EXPECT_FALSE(partial.product_tiles[0]);
  EXPECT_EQ(partial.label(), "generated per-product -,32x32x32/1x2");
  EXPECT_THROW(cuda::CudaVariant::parse("generated per-product 32x32x24/1x2"), std::invalid_argument);
  EXPECT_THROW(cuda::CudaVariant::parse("generated per-product fast"), std::invalid_argument);
}

// The sm_90a tile is one more choice per class, offered for the classes it can run (every product
// of the class eligible) and only when the space has it (the tuner clears it off CC 9.0): the
// chosen class runs on the tile, the others keep their mma.sync tiles; the label round-trips; a
// product it cannot run, given it anyway, is refused with the reason; and off CC 9.0 it is pruned.
TEST(CudaTileSearch, TheSm90aTileIsAPerProductChoiceWhereItRuns) {
  CudaSearchSpace space = cuda_search_space();
  space.hopper = true;
  const ir::Function gram = gram_schedule(1024, 4096);
  const auto classes = product_classes(gram, {}, 132);
  int offered = 0, split_offered = 0, wide_offered = 0;
  for (size_t which = 0; which < classes.size(); ++which) {
    const ProductClass& target = classes[which];
    for (const CudaCandidate& candidate : class_candidates(space, ir::StrategyKind::Gram, classes, which)) {
      const cuda::CudaVariant variant = cuda::CudaVariant::parse(candidate.variant);
      EXPECT_EQ(variant.label(), candidate.variant);
      if (candidate.variant.find("sm90a") == std::string::npos) {
        EXPECT_FALSE(variant.needs_sm90a()) << candidate.variant;
        continue;
      }
      ++offered;
      // The class's tile: "sm90a", "sm90a/kS" where the class's products leave SMs idle, or
      // "sm90a/n256" (128x256) for dense classes at least two 128-column tiles wide.
      std::smatch token;
      ASSERT_TRUE(std::regex_search(candidate.variant, token, std::regex("sm90a(/k([0-9]+)|/n256)?"))) << candidate.variant;
      if (token[0].str() == "sm90a/n256") {
        ++wide_offered;
        EXPECT_FALSE(target.triangular) << target.label();
        EXPECT_TRUE(target.sm90a_wide_eligible) << target.label();
        EXPECT_GE(target.n, 256) << target.label();
      }
      split_offered += token[2].matched;
      if (token[2].matched) {
        const int splits = std::stoi(token[2].str());
        EXPECT_TRUE(splits >= 2 && splits <= 4) << candidate.variant;
        // The unsplit product's 128x128 work items, counted here from the class's shape.
        const int64_t tiles_m = (target.m + 127) / 128, tiles_n = (target.n + 127) / 128;
        const int64_t items = target.triangular ? tiles_m * (tiles_m + 1) / 2 : tiles_m * tiles_n;
        EXPECT_LT(items * (splits - 1), 132) << candidate.variant << ": split only while SMs would idle";
        EXPECT_TRUE(cuda::split_k_valid(target.k, splits)) << candidate.variant;
      }
      EXPECT_TRUE(target.sm90a_eligible) << target.label();
      EXPECT_TRUE(variant.needs_sm90a());
      const cuda::CudaProgram program = cuda::generate_variant(gram, variant);
      EXPECT_TRUE(program.needs_sm90a());
      for (const cuda::Launch& launch : program.launches) {
        if (launch.product < 0) continue;
        const bool in_class = std::count(target.products.begin(), target.products.end(), launch.product) > 0;
        EXPECT_EQ(launch.hopper_tile(), in_class) << candidate.variant << ": " << launch.summary;
        EXPECT_EQ(launch.tile.label(), in_class ? token[0].str() : launch.tile.label());
        if (in_class) {
          EXPECT_NE(launch.summary.find("tile sm90a"), std::string::npos) << launch.summary;
        }
      }
      EXPECT_EQ(cuda_prune_reason(candidate, &gram, "", 227 * 1024, 90), std::nullopt);
      const auto off_hopper = cuda_prune_reason(candidate, &gram, "", 163 * 1024, 80);
      ASSERT_TRUE(off_hopper);
      EXPECT_NE(off_hopper->find("compute capability 9.0"), std::string::npos) << *off_hopper;
    }
    if (target.sm90a_eligible) {
      CudaSearchSpace without = space;
      without.hopper = false;
      for (const CudaCandidate& candidate : class_candidates(without, ir::StrategyKind::Gram, classes, which))
        EXPECT_EQ(candidate.variant.find("sm90a"), std::string::npos) << candidate.variant;
    }
  }
  EXPECT_GE(offered, 2);  // Gram's bf16 products at 1024x4096: R = X·Xᵀ, the m x m chain, Q·X
  // The 1024 x 1024 products are 36 upper tiles on 132 SMs: 2, 3 and 4 splits are offered.
  EXPECT_GE(split_offered, 3);
  EXPECT_GE(wide_offered, 1);  // Q·X, 1024x4096x1024, dense
  EXPECT_EQ(cuda::CudaVariant::parse("generated per-product -,sm90a/n256").label(), "generated per-product -,sm90a/n256");
  EXPECT_EQ(cuda::CudaVariant::parse("generated per-product sm90a,-").label(), "generated per-product sm90a,-");
  // f16 storage: the tile reads bf16 only. No class is offered it, and given it anyway the
  // product is refused with the reason.
  const ir::Function f16 = testing::compile(kernels::load_program_by_name_or_path("jordan_ns5"), 256, 512, ir::StrategyKind::Standard, ScalarType::F16, 1);
  const auto f16_classes = product_classes(f16, {}, 132);
  for (size_t which = 0; which < f16_classes.size(); ++which) {
    EXPECT_FALSE(f16_classes[which].sm90a_eligible);
    for (const CudaCandidate& candidate : class_candidates(space, ir::StrategyKind::Standard, f16_classes, which))
      EXPECT_EQ(candidate.variant.find("sm90a"), std::string::npos) << candidate.variant;
  }
  try {
    cuda::generate_variant(f16, cuda::CudaVariant::parse("generated per-product sm90a"));
    ADD_FAILURE() << "an f16 product ran on the sm_90a tile";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("was given the sm_90a tile, which cannot run it: A is stored as f16"), std::string::npos) << error.what();
  }
}

// The proxy (the program's first step at the full shape) has fewer products: a per-product
// choice reaches it by product shape, and the check's reduced shape (same products) by index.
TEST(CudaTileSearch, APerProductChoiceReachesTheProxyByShape) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const ir::Function full = testing::compile(program, 1024, 4096, ir::StrategyKind::Gram, ScalarType::BF16, 1);
  const ir::Function proxy = testing::compile(first_steps(program, 1), 1024, 4096, ir::StrategyKind::Gram, ScalarType::BF16, 1);
  auto classes = product_classes(full, {}, 132);
  const cuda::TileConfig choices[] = {{32, 32, 32, 1, 2}, {128, 128, 64, 2, 4}, {64, 64, 32, 2, 2}};
  std::map<std::string, std::string> by_shape;
  for (size_t i = 0; i < classes.size(); ++i) {
    classes[i].tile = classes[i].triangular ? choices[i % 3] : cuda::TileConfig{128, 64, 32, 2, 2};
    by_shape[classes[i].label().substr(0, classes[i].label().find(" ("))] = classes[i].tile.label();
  }
  const cuda::CudaVariant chosen = per_product_variant(classes);
  const cuda::CudaVariant mapped = variant_for_schedule(chosen, full, proxy, 132);
  ASSERT_LT(launched_tiles(proxy, {}).size(), launched_tiles(full, {}).size());
  int checked = 0;
  for (const cuda::Launch& launch : cuda::generate_variant(proxy, mapped).launches) {
    if (launch.product < 0) continue;
    const std::string shape = std::to_string(launch.m) + "x" + std::to_string(launch.n) + "x" + std::to_string(launch.k) + (launch.triangular ? " triangular" : "");
    ASSERT_TRUE(by_shape.count(shape)) << shape;
    EXPECT_EQ(launch.tile.label(), by_shape.at(shape)) << launch.summary;
    ++checked;
  }
  EXPECT_GT(checked, 2);
  const ir::Function reduced = testing::compile(program, 256, 1024, ir::StrategyKind::Gram, ScalarType::BF16, 1);
  EXPECT_EQ(variant_for_schedule(chosen, full, reduced, 132).label(), chosen.label());
}

// A split of K chosen at the full shape (4 splits of A·A's K = 1024: 16 tiles of 64) does not fit
// the check's reduced shape (K = 192: 3 tiles, one split would be empty): there the product keeps
// the most splits its K takes, so a valid candidate is checked instead of reported as failing to
// compile.
TEST(CudaTileSearch, ASplitOfKChosenAtTheFullShapeFitsTheReducedOne) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const ir::Function full = testing::compile(program, 1024, 14336, ir::StrategyKind::Standard, ScalarType::BF16, 1);
  const ir::Function reduced = testing::compile(program, 192, 768, ir::StrategyKind::Standard, ScalarType::BF16, 1);
  const size_t products = launched_tiles(full, {}).size();
  std::string text = "generated per-product ";
  for (size_t p = 0; p < products; ++p) text += std::string(p ? "," : "") + (p == 1 ? "sm90a/k4" : "-");
  const cuda::CudaVariant chosen = cuda::CudaVariant::parse(text);
  EXPECT_NO_THROW(cuda::generate_variant(full, chosen, 227 * 1024, 132));
  EXPECT_THROW(cuda::generate_variant(reduced, chosen, 227 * 1024, 132), std::invalid_argument);  // as the tuner used to build it
  const cuda::CudaVariant mapped = variant_for_schedule(chosen, full, reduced, 132);
  ASSERT_TRUE(mapped.product_tiles.at(1).has_value());
  EXPECT_EQ(mapped.product_tiles[1]->splits, 3) << mapped.label();
  EXPECT_NO_THROW(cuda::generate_variant(reduced, mapped, 227 * 1024, 132)) << mapped.label();
  EXPECT_EQ(variant_for_schedule(chosen, full, full, 132).label(), chosen.label());  // the full shape keeps its 4
}

}  // namespace
}  // namespace orthojit::autotune
