// Per-product tiles by coordinate descent over product classes (see cuda_tile_search.h).
#include "autotune/cuda_tile_search.h"

#include <algorithm>
#include <stdexcept>

#include "cuda/cuda_backend.h"
#include "cuda/hopper_codegen.h"
#include "cuda/sm90a_switch.h"

namespace orthojit::autotune {

std::string ProductClass::label() const {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + (triangular ? " triangular" : "") + " (x" + std::to_string(products.size()) + ")";
}

std::vector<ProductClass> product_classes(const ir::Function& scheduled, const cuda::CudaVariant& variant, int multiprocessors) {
  if (variant.kind != cuda::CudaVariant::Kind::Generated) throw std::invalid_argument("per-product tiles: " + variant.label() + " is not a generated variant");
  // The launches say what each product is and which tile it got (defaults and fallbacks included).
  const cuda::CudaProgram program = cuda::generate_variant(scheduled, variant, 163 * 1024, multiprocessors);
  std::vector<ProductClass> classes;
  for (const cuda::Launch& launch : program.launches) {
    if (launch.product < 0) continue;
    auto same = std::find_if(classes.begin(), classes.end(), [&](const ProductClass& c) {
      return c.m == launch.m && c.n == launch.n && c.k == launch.k && c.triangular == launch.triangular && c.tile.label() == launch.tile.label();
    });
    if (same == classes.end()) {
      classes.push_back({launch.m, launch.n, launch.k, launch.triangular, {}, launch.tile});
      same = classes.end() - 1;
    }
    same->products.push_back(launch.product);
  }
  // Which products the sm_90a tile can run: those it takes when every product may use it.
  cuda::CodegenOptions on_tile;
  on_tile.multiprocessors = multiprocessors;
  on_tile.hopper_products = true;
  // (Split-K is tried up to 4 splits: each split costs a workspace pass, and beyond 4 the partial
  // sums' traffic outweighs the SMs gained for the shapes that need it.)
  constexpr int kSearchedSplits = 4;
  std::vector<int> eligible;
  std::vector<int64_t> items;
  for (const cuda::Launch& launch : cuda::generate_cuda(scheduled, on_tile).launches)
    if (launch.hopper_tile()) {
      eligible.push_back(launch.product);
      items.push_back(launch.grid[0]);
    }
  for (ProductClass& c : classes) {
    c.sm90a_eligible = std::all_of(c.products.begin(), c.products.end(), [&](int product) { return std::count(eligible.begin(), eligible.end(), product) > 0; });
    if (!c.sm90a_eligible) continue;
    const int64_t unsplit = items[static_cast<size_t>(std::find(eligible.begin(), eligible.end(), c.products.front()) - eligible.begin())];
    for (int splits = 2; splits <= kSearchedSplits; ++splits)
      if (cuda::split_k_valid(c.k, splits) && unsplit * (splits - 1) < multiprocessors) c.sm90a_splits.push_back(splits);
    // The wide tile: asked of the generator itself, which refuses (with the reason) a product the
    // tile cannot run (a triangular one, a D other than bf16).
    if (c.triangular || c.n < 2 * static_cast<int64_t>(cuda::sm90a_tile().bn)) continue;
    cuda::CodegenOptions wide;
    wide.multiprocessors = multiprocessors;
    for (int product : c.products) {
      if (wide.gemm_tiles.size() <= static_cast<size_t>(product)) wide.gemm_tiles.resize(static_cast<size_t>(product) + 1);
      wide.gemm_tiles[static_cast<size_t>(product)] = cuda::sm90a_wide_tile();
    }
    try {
      cuda::generate_cuda(scheduled, wide);
      c.sm90a_wide_eligible = true;
    } catch (const std::invalid_argument&) {
      c.sm90a_wide_eligible = false;
    }
  }
  // Most work first; equal work in schedule order (stable).
  std::stable_sort(classes.begin(), classes.end(), [](const ProductClass& a, const ProductClass& b) { return a.flops() > b.flops(); });
  return classes;
}

cuda::CudaVariant per_product_variant(const std::vector<ProductClass>& classes) {
  cuda::CudaVariant variant;
  for (const ProductClass& c : classes)
    for (int product : c.products) {
      if (variant.product_tiles.size() <= static_cast<size_t>(product)) variant.product_tiles.resize(static_cast<size_t>(product) + 1);
      variant.product_tiles[static_cast<size_t>(product)] = c.tile;
    }
  return variant;
}

std::vector<CudaCandidate> class_candidates(const CudaSearchSpace& space, ir::StrategyKind strategy, const std::vector<ProductClass>& classes, size_t which) {
  std::vector<CudaCandidate> candidates;
  const ProductClass& target = classes.at(which);
  std::vector<cuda::TileConfig> tiles = space.tiles;
  // Not while ORTHOJIT_CUDA_SM90A turns the tile off: the main list's "generated hopper" is pruned
  // saying so, and a candidate per class and tile would only repeat it.
  if (space.hopper && target.sm90a_eligible && cuda::sm90a_disabled_reason().empty()) {
    tiles.push_back(cuda::sm90a_tile());
    for (int splits : target.sm90a_splits) tiles.push_back(cuda::sm90a_tile(splits));
    if (target.sm90a_wide_eligible) tiles.push_back(cuda::sm90a_wide_tile());
  }
  for (const cuda::TileConfig& tile : tiles) {
    if (tile.label() == target.tile.label()) continue;
    if (target.triangular && tile.bm != tile.bn) continue;  // the upper-tile schedule needs square tiles
    if (tile.bm >= 2 * target.m && tile.bn >= 2 * target.n) continue;  // mostly padding (as cuda_prune_reason)
    std::vector<ProductClass> changed = classes;
    changed[which].tile = tile;
    candidates.push_back({strategy, per_product_variant(changed).label()});
  }
  return candidates;
}

std::vector<CudaCandidate> product_tile_candidates(const CudaSearchSpace& space, ir::StrategyKind strategy, const ir::Function& scheduled, int multiprocessors) {
  const std::vector<ProductClass> classes = product_classes(scheduled, cuda::CudaVariant{}, multiprocessors);
  std::vector<CudaCandidate> candidates;
  // One class alone runs the same kernels as the uniform tile variants already in the space.
  if (classes.size() < 2) return candidates;
  for (size_t which = 0; which < classes.size(); ++which)
    for (const CudaCandidate& candidate : class_candidates(space, strategy, classes, which)) candidates.push_back(candidate);
  return candidates;
}

std::optional<CudaCandidate> combined_product_tiles(const CudaSearchSpace& space, ir::StrategyKind strategy, const ir::Function& scheduled, double start_ms,
                                                    const MeasuredTime& measured, int multiprocessors) {
  std::vector<ProductClass> classes = product_classes(scheduled, cuda::CudaVariant{}, multiprocessors);
  const std::vector<ProductClass> defaults = classes;
  int improved = 0;
  for (size_t which = 0; which < defaults.size(); ++which) {
    double best_ms = start_ms * (1 - space.tie_tolerance);
    std::optional<cuda::TileConfig> best;
    for (const CudaCandidate& candidate : class_candidates(space, strategy, defaults, which)) {
      const std::optional<double> ms = measured(candidate);
      if (ms && *ms < best_ms) {
        best_ms = *ms;
        best = cuda::CudaVariant::parse(candidate.variant).product_tiles.at(static_cast<size_t>(defaults[which].products.front()));
      }
    }
    if (best) {
      classes[which].tile = *best;
      ++improved;
    }
  }
  if (improved < 2) return std::nullopt;
  return CudaCandidate{strategy, per_product_variant(classes).label()};
}

namespace {

// A split of K valid at the full shape may leave a split without K tiles at the target's (the
// reduced check shape's K of 192 is 3 tiles of 64): each product keeps the most splits its own K
// takes, at least one (the unsplit sm_90a tile), so a valid candidate is not reported as failing to
// compile where it is only checked.
cuda::CudaVariant splits_within(cuda::CudaVariant variant, const std::vector<ProductClass>& target_classes) {
  for (const ProductClass& c : target_classes)
    for (int product : c.products) {
      if (static_cast<size_t>(product) >= variant.product_tiles.size()) continue;
      std::optional<cuda::TileConfig>& tile = variant.product_tiles[static_cast<size_t>(product)];
      if (!tile || !tile->sm90a) continue;
      while (tile->splits > 1 && !cuda::split_k_valid(c.k, tile->splits)) --tile->splits;
    }
  return variant;
}

}  // namespace

cuda::CudaVariant variant_for_schedule(const cuda::CudaVariant& chosen, const ir::Function& full, const ir::Function& target, int multiprocessors) {
  if (chosen.product_tiles.empty()) return chosen;
  const std::vector<ProductClass> full_classes = product_classes(full, chosen, multiprocessors);
  const std::vector<ProductClass> target_classes = product_classes(target, {}, multiprocessors);
  size_t full_products = 0, target_products = 0;
  for (const ProductClass& c : full_classes) full_products += c.products.size();
  for (const ProductClass& c : target_classes) target_products += c.products.size();
  if (full_products == target_products) return splits_within(chosen, target_classes);
  cuda::CudaVariant variant;
  variant.product_tiles.resize(target_products);
  for (const ProductClass& c : target_classes)
    for (const ProductClass& f : full_classes)
      if (f.m == c.m && f.n == c.n && f.k == c.k && f.triangular == c.triangular)
        for (int product : c.products) variant.product_tiles[static_cast<size_t>(product)] = f.tile;
  return splits_within(variant, target_classes);
}

}  // namespace orthojit::autotune
