// The generated program's products on the sm_90a tile (see hopper_codegen.h).
#include "cuda/hopper_codegen.h"

#include <algorithm>

#include "cuda/hopper_product.h"
#include "cuda/orthojit_hopper_layout.cuh"
#include "cuda/tile_schedule.h"

namespace orthojit::cuda {
namespace {

bool b_mn_major(const View& b) { return b.col_stride == 1 && b.row_stride != 1; }

// Why a view cannot be moved by TMA with its rows along `inner_is_cols ? columns : rows`: empty
// when it can.
std::string tma_view_reason(const View& view, const char* name, bool inner_is_cols) {
  if (view.slot.kind != Slot::Kind::Buffer || view.slot.buffer < 0)
    return std::string(name) + " is not a planned buffer (tensor maps are encoded once, over the workspace)";
  const int64_t stride = inner_is_cols ? view.row_stride : view.col_stride, bytes = size_in_bytes(view.type);
  if (stride * bytes % 16 != 0)
    return std::string(name) + "'s rows are " + std::to_string(stride) + " elements apart, not a multiple of " + std::to_string(16 / bytes) +
           " (TMA needs 16-byte aligned rows)";
  if (view.matrix_stride * bytes % 16 != 0)
    return std::string(name) + "'s matrices are " + std::to_string(view.matrix_stride) + " elements apart, not a multiple of " + std::to_string(16 / bytes) +
           " (TMA needs 16-byte aligned strides)";
  return "";
}
std::string bf16_operand_reason(const View& view, const char* name, bool inner_is_cols) {
  if (view.type != ScalarType::BF16) return std::string(name) + " is stored as " + std::string(to_string(view.type)) + " (the tile reads bf16)";
  return tma_view_reason(view, name, inner_is_cols);
}

// A tensor map over `view` (rows of `inner` elements, `outer` of them, per matrix of the batch),
// in boxes of one 128-byte row x box_outer.
TensorMapRequest view_map(const View& view, bool inner_is_cols, int64_t inner, int64_t outer, int64_t batch, uint32_t box_outer) {
  const auto element_bytes = static_cast<uint32_t>(size_in_bytes(view.type));
  TensorMapRequest request = tile_map(inner, outer, inner_is_cols ? view.row_stride : view.col_stride, element_bytes, box_outer);
  request.dims[2] = static_cast<uint64_t>(batch);
  if (view.matrix_stride > 0) request.matrix_bytes = static_cast<uint64_t>(view.matrix_stride) * element_bytes;
  return request;
}

}  // namespace

bool split_k_valid(int64_t k, int splits) {
  const int64_t k_tiles = (k + oj::hopper::kTileK - 1) / oj::hopper::kTileK;
  if (splits < 1 || splits > kMaxSplits || k_tiles < 1) return false;
  const int64_t per_split = (k_tiles + splits - 1) / splits;
  return (splits - 1) * per_split < k_tiles;
}

std::string hopper_ineligible_reason(const HopperProductRequest& product) {
  if (product.tile_n != static_cast<int>(oj::hopper::kTileN)) {
    if (product.tile_n != static_cast<int>(oj::hopper::kWideTileN)) return "a tile " + std::to_string(product.tile_n) + " columns wide (128 or 256)";
    if (product.triangular) return "a triangular product on the 128x256 tile (the upper-tile schedule needs square tiles)";
    if (product.splits != 1) return "split-K on the 128x256 tile";
    if (product.d.type != ScalarType::BF16) return "D is stored as " + std::string(to_string(product.d.type)) + " (the 128x256 tile writes bf16)";
  }
  if (product.splits != 1) {
    if (!split_k_valid(product.k, product.splits))
      return std::to_string(product.splits) + " splits of K = " + std::to_string(product.k) + " would leave a split without K tiles of 64";
    if (product.has_c || product.alpha != 1 || product.gamma != 0 || product.d.type != ScalarType::F32)
      return "split-K partials are the plain product into f32 (alpha 1, no C or gamma: the reduction applies them)";
    if (product.batch * product.splits > 65535) return "a batch of " + std::to_string(product.batch) + " in " + std::to_string(product.splits) + " splits (more than 65535 slices)";
  }
  if (product.batch < 1 || product.batch > 65535) return "a batch of " + std::to_string(product.batch) + " matrices (at most 65535: the tensor maps' third dimension is checked as grid.z was)";
  if (product.fused_update) return "the product carries a Muon step's fused update";
  if (product.m < 1 || product.n < 1 || product.k < 1) return "an empty product";
  if (std::max({product.m, product.n, product.k}) >= (int64_t{1} << 31)) return "a dimension beyond 2^31 - 1";
  if (product.triangular && product.m != product.n) return "a triangular product that is not square";
  if (product.a.col_stride != 1) return "A is not k-contiguous (wgmma reads A K-major)";
  if (std::string reason = bf16_operand_reason(product.a, "A", true); !reason.empty()) return reason;
  const View& b = product.b;
  if (b.row_stride != 1 && b.col_stride != 1) return "B is neither k- nor n-contiguous";
  if (std::string reason = bf16_operand_reason(b, "B", b_mn_major(b)); !reason.empty()) return reason;
  if (product.d.type != ScalarType::BF16 && product.d.type != ScalarType::F32) return "D is stored as " + std::string(to_string(product.d.type)) + " (the tile writes bf16 or f32)";
  if (product.d.col_stride != 1) return "D is not row-major";
  if (std::string reason = tma_view_reason(product.d, "D", true); !reason.empty()) return reason;
  if (product.has_c) {
    if (product.c.type != ScalarType::BF16 || product.c.col_stride != 1) return "C is not row-major bf16";
    if (std::string reason = tma_view_reason(product.c, "C", true); !reason.empty()) return reason;
  }
  return "";
}

Launch emit_hopper_product(std::ostream& source, const HopperProductRequest& product) {
  if (const std::string reason = hopper_ineligible_reason(product); !reason.empty())
    throw std::invalid_argument(product.kernel + " cannot run on the sm_90a tile: " + reason);
  namespace h = oj::hopper;
  const bool mn_major = b_mn_major(product.b);
  const int64_t tile_n = product.tile_n;
  const int64_t tiles_m = (product.m + h::kTileM - 1) / h::kTileM, tiles_n = (product.n + tile_n - 1) / tile_n;
  const int64_t per_matrix = product.triangular ? tiles_m * (tiles_m + 1) / 2 : tiles_m * tiles_n;
  const int64_t items = per_matrix * product.batch * product.splits;
  if (items >= (int64_t{1} << 31)) throw std::invalid_argument(product.kernel + ": " + std::to_string(items) + " tiles exceed the grid limits");
  // Bands of about √(wave) tile rows (triangular), or of 8 (Triton's GROUP_SIZE_M): the CTAs
  // running at once share A and B panels in L2. 132: the SMs of an H100/H200 SXM, the wave the
  // bands are sized for (any other count runs the same items).
  const int group = product.triangular ? triangular_group(static_cast<int>(tiles_m), std::min<int64_t>(per_matrix, 132)) : 8;
  const ScalarType d_type = product.d.type;
  const h::SharedPlan plan = h::shared_plan(static_cast<h::u32>(size_in_bytes(d_type)), product.triangular, static_cast<h::u32>(tile_n));
  const char* d_tag = storage_tag(d_type);
  source << "// " << product.kernel << " = " << product.alpha << "·A·B" << (product.has_c ? " + " + std::to_string(product.beta) + "·C" : "")
         << (product.gamma != 0 ? " + " + std::to_string(product.gamma) + "·I" : "") << ": " << product.m << "x" << product.n << "x" << product.k
         << " on the sm_90a tile 128x" << tile_n << " (TMA, wgmma, " << plan.stages << " stages, persistent over " << items << " tiles), B " << (mn_major ? "MN" : "K") << "-major"
         << (product.triangular ? ", triangular (upper tiles in bands of " + std::to_string(group) + ")" : "") << "\n"
         << "#include \"orthojit_hopper_product.cuh\"\n"
         << "extern \"C\" __global__ void __launch_bounds__(" << h::kThreads << ", 1) " << product.kernel
         << "(const __grid_constant__ oj::hopper::TensorMap a_map, const __grid_constant__ oj::hopper::TensorMap b_map, "
         << (product.has_c ? "const __grid_constant__ oj::hopper::TensorMap c_map, " : "") << "const __grid_constant__ oj::hopper::TensorMap d_map) {\n"
         << "  oj::hopper::product_tile<" << (mn_major ? "true" : "false") << ", " << (product.triangular ? "true" : "false") << ", "
         << (product.has_c ? "true" : "false") << ", " << d_tag << ", " << tile_n << ">(a_map, b_map, " << (product.has_c ? "&c_map" : "nullptr") << ", d_map, " << product.k << ", "
         << literal(product.alpha) << ", " << literal(product.has_c ? product.beta : 0.0) << ", " << literal(product.gamma) << ", " << tiles_m << ", "
         << tiles_n << ", " << group << ", " << items << ", " << product.splits << ");\n}\n\n";

  Launch launch;
  launch.kernel = product.kernel;
  launch.grid[0] = items;
  launch.persistent = true;
  launch.block = static_cast<int>(h::kThreads);
  launch.dynamic_shared_bytes = static_cast<int>(h::dynamic_shared_bytes(static_cast<h::u32>(size_in_bytes(d_type)), product.triangular, static_cast<h::u32>(tile_n)));
  // A: m rows of K in boxes of 64 k x 128 rows. B: MN-major, K rows of N in boxes of 64 columns
  // x 64 rows (two per stage); K-major, N rows of K (Bᵀ) in one box of 64 k x 128 rows. C and D:
  // m rows of N in boxes of 128 bytes x 128 rows (what the epilogue tile holds per box).
  launch.tensor_maps = {{product.a.slot, view_map(product.a, true, product.k, product.m, product.batch, h::kTileM)},
                        {product.b.slot, mn_major ? view_map(product.b, true, product.n, product.k, product.batch, h::kTileK)
                                                  : view_map(product.b, false, product.k, product.n, product.batch, static_cast<uint32_t>(tile_n))}};
  if (product.has_c) launch.tensor_maps.push_back({product.c.slot, view_map(product.c, true, product.n, product.m, product.batch, h::kTileM)});
  launch.tensor_maps.push_back({product.d.slot, view_map(product.d, true, product.n, product.m, product.batch * product.splits, h::kTileM)});
  launch.summary = std::to_string(product.m) + "x" + std::to_string(product.n) + "x" + std::to_string(product.k) + " tile " + (tile_n == oj::hopper::kWideTileN ? sm90a_wide_tile() : sm90a_tile(product.splits)).label() + " 128x" + std::to_string(tile_n) + "x64 (TMA + wgmma, " +
                   std::to_string(plan.stages) + " stages, persistent over " + std::to_string(items) + " work items, TMA-stored epilogue, B " + (mn_major ? "MN" : "K") + "-major)" +
                   (product.triangular ? " triangular" : "") + (product.splits > 1 ? ", split-K partials into f32" : "");
  launch.m = product.m;
  launch.n = product.n;
  launch.k = product.k;
  launch.triangular = product.triangular;
  return launch;
}

}  // namespace orthojit::cuda
