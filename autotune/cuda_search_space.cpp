// The CUDA search space (see cuda_search_space.h).
#include "autotune/cuda_search_space.h"

#include <stdexcept>

#include "autotune/tuning_options.h"
#include "cuda/cuda_backend.h"

namespace orthojit::autotune {

extern const char* const kCudaSearchSpaceJson;

namespace {
nlohmann::json product_tiles_json(const cuda::CudaVariant& variant) {
  nlohmann::json tiles = nlohmann::json::array();
  for (const auto& tile : variant.product_tiles) tiles.push_back(tile ? tile->label() : "default");
  return tiles;
}
}  // namespace

nlohmann::json CudaCandidate::to_json() const {
  nlohmann::json value = {{"backend", "cuda"}, {"strategy", ir::to_string(strategy)}, {"variant", variant}};
  const cuda::CudaVariant parsed = cuda::CudaVariant::parse(variant);
  if (!parsed.product_tiles.empty()) value["product_tiles"] = product_tiles_json(parsed);
  return value;
}

CudaCandidate CudaCandidate::from_json(const nlohmann::json& value) {
  if (!value.is_object() || value.value("backend", "") != "cuda") throw std::invalid_argument("not a cuda candidate (backend must be \"cuda\")");
  CudaCandidate candidate;
  candidate.strategy = parse_strategy_or_throw(value.value("strategy", ""), "cuda candidate");
  candidate.variant = value.value("variant", "");
  const cuda::CudaVariant variant = cuda::CudaVariant::parse(candidate.variant);  // throws with the valid forms
  if (value.contains("product_tiles") && value.at("product_tiles") != product_tiles_json(variant))
    throw std::invalid_argument("cuda candidate: product_tiles " + value.at("product_tiles").dump() + " disagree with the variant '" + candidate.variant + "'");
  return candidate;
}

CudaSearchSpace parse_cuda_search_space(const nlohmann::json& document) {
  CudaSearchSpace space;
  try {
    if (document.at("backend").get<std::string>() != "cuda") throw std::invalid_argument("backend is not \"cuda\"");
    for (const auto& name : document.at("strategies").get<std::vector<std::string>>())
      space.strategies.push_back(parse_strategy_or_throw(name, "the CUDA search space"));
    for (const auto& tile : document.at("tiles")) {
      const auto values = tile.get<std::vector<int>>();
      if (values.size() != 5) throw std::invalid_argument("a tile is [BM, BN, BK, warps_m, warps_n]");
      const cuda::TileConfig config{values[0], values[1], values[2], values[3], values[4]};
      if (const std::string reason = config.invalid_reason(); !reason.empty()) throw std::invalid_argument("tile " + config.label() + ": " + reason);
      space.tiles.push_back(config);
    }
    space.fused_small = document.value("fused_small", true);
    space.cublas = document.value("cublas", true);
    space.cublaslt = document.value("cublaslt", true);
    space.hopper = document.value("hopper", true);
    space.min_repeats = document.value("min_repeats", 5);
    space.max_repeats = document.value("max_repeats", 50);
    space.tie_tolerance = document.value("tie_tolerance", 0.02);
    space.retime_top = document.value("retime_top", 3);
    if (space.min_repeats < 1 || space.max_repeats < space.min_repeats) throw std::invalid_argument("need 1 <= min_repeats <= max_repeats");
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument(std::string("the CUDA search space: ") + error.what());
  }
  return space;
}

const CudaSearchSpace& cuda_search_space() {
  static const CudaSearchSpace space = parse_cuda_search_space(nlohmann::json::parse(kCudaSearchSpaceJson));
  return space;
}

std::vector<CudaCandidate> cuda_candidates(const CudaSearchSpace& space, const CudaCandidate& first) {
  std::vector<CudaCandidate> candidates = {first};
  auto add = [&](const CudaCandidate& candidate) {
    for (const auto& existing : candidates)
      if (existing == candidate) return;
    candidates.push_back(candidate);
  };
  // What a budget must reach first, for every strategy: the default tiles, the vendor libraries
  // (no NVRTC compile: the "vs cuBLAS" comparison costs little), the sm_90a tile and the fused
  // kernel; then every tile configuration (an NVRTC compile of 3-4 s each). Within a strategy
  // the loop used to reach the vendors only after every tile: on a lent device with a 45-second
  // budget, not at all.
  for (const auto& strategy : space.strategies) {
    add({strategy, "generated"});
    if (space.cublaslt) add({strategy, "cublaslt"});
    if (space.cublas) add({strategy, "cublas"});
    if (space.hopper) add({strategy, "generated hopper"});
    if (space.fused_small) add({strategy, "fused-small"});
  }
  for (const auto& strategy : space.strategies)
    for (const cuda::TileConfig& tile : space.tiles) add({strategy, "generated " + tile.label()});
  return candidates;
}

std::optional<std::string> cuda_prune_reason(const CudaCandidate& candidate, const ir::Function* scheduled, const std::string& strategy_error,
                                             int shared_memory_limit, int device_sm) {
  const std::string strategy = ir::to_string(candidate.strategy);
  if (!strategy_error.empty()) return "the " + strategy + " strategy cannot compile this program: " + strategy_error;
  if (!scheduled) return "no schedule for the " + strategy + " strategy";
  const cuda::CudaVariant variant = cuda::CudaVariant::parse(candidate.variant);
  if (std::string reason = cuda::variant_unavailable_reason(*scheduled, variant, shared_memory_limit); !reason.empty()) return reason;
  if (variant.needs_sm90a() && device_sm != 90)
    return "the sm_90a product tile runs on compute capability 9.0 only (this device: sm_" + std::to_string(device_sm) + ")";
  if (variant.hopper) {
    cuda::CodegenOptions options;
    options.hopper_products = true;
    if (!cuda::generate_cuda(*scheduled, options).needs_sm90a()) return "no product of this schedule can run on the sm_90a tile (f16, or rows TMA cannot address)";
  }
  if (variant.tile) {
    // A tile at least twice the product's size in both dimensions computes mostly padding, and the
    // next smaller tile of the space covers the product at least as well.
    const int64_t m = std::min(scheduled->input_shape.rows.size, scheduled->input_shape.cols.size);
    if (variant.tile->bm >= 2 * m && variant.tile->bn >= 2 * m) return "tile " + variant.tile->label() + " is at least twice the " + std::to_string(m) + "-row products";
  }
  return std::nullopt;
}

}  // namespace orthojit::autotune
