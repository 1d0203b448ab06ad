// Per-product tiles for the CUDA tuner: each product of a schedule gets its own tile from the
// search space. The products are grouped into classes of equal shape (m, n, k, triangular: a
// Gram iteration's m x m chain is one or two classes however many steps it has, its Q·X another),
// and searched in the tuning loop's two rounds (tuning_loop.h): first every tile of the space
// for one class with the others at their default tiles (a coordinate search from the defaults),
// then the combination of every class's fastest tile. Product kernels run one after another, so
// a class's tile changes its own kernels' time and little else: the combination is where the
// coordinate search leads. Triangular classes take square tiles only (the
// upper-tile schedule and its mirror stores, which keep symmetric results exactly symmetric).
// Host code: the classes, candidates and the descent are tested with a stand-in for the timing.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autotune/cuda_search_space.h"
#include "cuda/cuda_backend.h"
#include "ir/function.h"

namespace orthojit::autotune {

struct ProductClass {
  int64_t m = 0, n = 0, k = 0;
  bool triangular = false;
  std::vector<int> products;  // indices among the schedule's products (CodegenOptions::gemm_tiles)
  cuda::TileConfig tile;      // the tile the class runs with under the variant it was read from
  bool sm90a_eligible = false;  // the sm_90a tile can run its products (hopper_ineligible_reason)
  // Split-K on the sm_90a tile worth trying (2 to kSearchedSplits): a split count s where K has
  // s non-empty parts and the unsplit product leaves SMs idle (its work items times s - 1 fewer
  // than the device's multiprocessors), so that the splits run in otherwise idle SMs.
  std::vector<int> sm90a_splits{};
  // The 128x256 sm_90a tile can run its products too (dense, bf16 D) and they are at least two
  // tiles of 128 wide (narrower ones would mostly compute padding).
  bool sm90a_wide_eligible = false;
  std::string label() const;  // "1024x1024x1024 triangular (x14)"
  double flops() const { return 2.0 * static_cast<double>(m * n * k) * (triangular ? 0.5 : 1.0) * static_cast<double>(products.size()); }
};

// The classes of `scheduled`'s products under `variant` (a generated variant), most work first.
std::vector<ProductClass> product_classes(const ir::Function& scheduled, const cuda::CudaVariant& variant, int multiprocessors);

// The variant giving each product the tile of its class.
cuda::CudaVariant per_product_variant(const std::vector<ProductClass>& classes);

// `classes` with class `which` set to each tile of the space that can run it and differs from its
// current one, as candidates of `strategy` (square tiles only for a triangular class; none at
// least twice the class's product in both dimensions). With space.hopper, the sm_90a tile is one
// of them for a class it can run: so each product chooses between the wgmma tile and the
// mma.sync tiles (a 1024x1024 triangular product fills 36 SMs of 132 with the 128-wide sm_90a
// tile, 136 CTAs with a 64x64 mma.sync tile; or with K in 2 to 4 splits, 72 to 144 work items).
// The tuner clears space.hopper on other devices; none is offered while ORTHOJIT_CUDA_SM90A turns
// the tile off (cuda/sm90a_switch.h).
std::vector<CudaCandidate> class_candidates(const CudaSearchSpace& space, ir::StrategyKind strategy, const std::vector<ProductClass>& classes, size_t which);

// Round one of the search (the tuning loop's first candidates): per strategy with a schedule, every
// class's candidates with the other classes at their default tiles ("generated").
std::vector<CudaCandidate> product_tile_candidates(const CudaSearchSpace& space, ir::StrategyKind strategy, const ir::Function& scheduled, int multiprocessors);

// The median time of a judged candidate, or nullopt when it failed or was not run (budget).
using MeasuredTime = std::function<std::optional<double>(const CudaCandidate&)>;

// Round two: each class at its fastest tile of round one (faster than the defaults' `start_ms` by
// more than the tie tolerance), the rest at their defaults. nullopt when fewer than two classes
// improved (a single improved class was timed in round one already).
std::optional<CudaCandidate> combined_product_tiles(const CudaSearchSpace& space, ir::StrategyKind strategy, const ir::Function& scheduled, double start_ms,
                                                    const MeasuredTime& measured, int multiprocessors);

// `chosen` (a variant for `full`'s products) for `target`, another schedule of the same problem:
// unchanged when both have as many products (the reduced shape of the check: the same program,
// so the same products in the same order); else (the proxy: the first steps only) each product of
// `target` takes the tile of `full`'s products of its shape, its default when `full` has none.
cuda::CudaVariant variant_for_schedule(const cuda::CudaVariant& chosen, const ir::Function& full, const ir::Function& target, int multiprocessors);

}  // namespace orthojit::autotune
