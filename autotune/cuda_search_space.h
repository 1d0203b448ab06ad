// The CUDA search space as data (autotune/search_spaces/cuda.json, embedded): strategy x variant
// (generated kernels per tile configuration, the fused small-matrix kernel, the cuBLAS NS, the
// cuBLASLt NS: the vendor candidate, standard or Gram by the strategy), and
// the pruning of candidates that cannot run a problem, each with its reason. Host code only: the
// candidate list and its pruning are tested without a GPU.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_codegen.h"
#include "dsl/ast.h"
#include "ir/function.h"

namespace orthojit::autotune {

// One configuration of the CUDA backend.
struct CudaCandidate {
  ir::StrategyKind strategy = ir::StrategyKind::Standard;
  std::string variant = "generated";  // a cuda::CudaVariant label
  std::string label() const { return "cuda " + std::string(ir::to_string(strategy)) + " " + variant; }
  // A per-product variant also lists its tiles under "product_tiles" (one per product in schedule
  // order, "default" for a product's default tile), for reading; the variant label stays the
  // record of the choice.
  nlohmann::json to_json() const;
  // Throws std::invalid_argument naming the bad field (also a "product_tiles" list that
  // disagrees with the variant). Records written before per-product tiles load unchanged.
  static CudaCandidate from_json(const nlohmann::json& value);
  bool operator==(const CudaCandidate& other) const = default;
};

struct CudaSearchSpace {
  std::vector<ir::StrategyKind> strategies;  // parsed once from the document's names
  std::vector<cuda::TileConfig> tiles;
  bool fused_small = true, cublas = true, cublaslt = true;
  bool hopper = true;  // "generated hopper": the products on the sm_90a tile (CC 9.0 devices)
  int min_repeats = 5, max_repeats = 50;
  double tie_tolerance = 0.02;
  int retime_top = 3;
};

const CudaSearchSpace& cuda_search_space();
CudaSearchSpace parse_cuda_search_space(const nlohmann::json& document);  // throws std::invalid_argument

// Every candidate in order: `first` (the untuned default) leads, then per strategy the generated
// variant with default tiles, each tile, the sm_90a tile ("generated hopper"), the fused kernel,
// cuBLAS, cuBLASLt.
std::vector<CudaCandidate> cuda_candidates(const CudaSearchSpace& space, const CudaCandidate& first);

// Why `candidate` cannot run `scheduled` (the problem compiled with the candidate's strategy), or
// nullopt. `strategy_error` is the compiler's reason the strategy is impossible (empty when
// possible); `shared_memory_limit` the device's opt-in bytes per block; `device_sm` its compute
// capability as 10·major + minor (the sm_90a tile runs on 90 only, and not while
// ORTHOJIT_CUDA_SM90A turns it off: variant_unavailable_reason says so).
std::optional<std::string> cuda_prune_reason(const CudaCandidate& candidate, const ir::Function* scheduled, const std::string& strategy_error,
                                             int shared_memory_limit, int device_sm = 90);

}  // namespace orthojit::autotune
