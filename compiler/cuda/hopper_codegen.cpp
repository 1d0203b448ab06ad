// The generated program's products on the sm_90a tile (see hopper_codegen.h).
#include "cuda/hopper_codegen.h"

#include <algorithm>

#include "cuda/hopper_product.h"
#include "cuda/orthojit_hopper_layout.cuh"
#include "cuda/tile_schedule.h"

namespace orthojit::cuda {
namespace {

bool b_mn_major(const View& b) { return b.col_stride == 1 && b.row_stride != 1; }

// Why a TMA operand view cannot be read: empty when it can.
std::string tma_operand_reason(const View& view, const char* name, bool inner_is_cols) {
  if (view.type != ScalarType::BF16) return std::string(name) + " is stored as " + std::string(to_string(view.type)) + " (the tile reads bf16)";
  if (view.slot.kind != Slot::Kind::Buffer || view.slot.buffer < 0)
    return std::string(name) + " is not a planned buffer (tensor maps are encoded once, over the workspace)";
  const int64_t stride = inner_is_cols ? view.row_stride : view.col_stride;
  if (stride % 8 != 0) return std::string(name) + "'s rows are " + std::to_string(stride) + " elements apart, not a multiple of 8 (TMA needs 16-byte aligned rows)";
  if (view.matrix_stride % 8 != 0)
    return std::string(name) + "'s matrices are " + std::to_string(view.matrix_stride) + " elements apart, not a multiple of 8 (TMA needs 16-byte aligned strides)";
  return "";
}

}  // namespace

std::string hopper_ineligible_reason(const HopperProductRequest& product) {
  if (product.batch < 1 || product.batch > 65535) return "a batch of " + std::to_string(product.batch) + " matrices (grid.z holds 1 to 65535)";
  if (product.fused_update) return "the product carries a Muon step's fused update";
  if (product.m < 1 || product.n < 1 || product.k < 1) return "an empty product";
  if (std::max({product.m, product.n, product.k}) >= (int64_t{1} << 31)) return "a dimension beyond 2^31 - 1";
  if (product.triangular && product.m != product.n) return "a triangular product that is not square";
  if (product.a.col_stride != 1) return "A is not k-contiguous (wgmma reads A K-major)";
  if (std::string reason = tma_operand_reason(product.a, "A", true); !reason.empty()) return reason;
  const View& b = product.b;
  if (b.row_stride != 1 && b.col_stride != 1) return "B is neither k- nor n-contiguous";
  if (std::string reason = tma_operand_reason(b, "B", b_mn_major(b)); !reason.empty()) return reason;
  if (product.d.type != ScalarType::BF16 && product.d.type != ScalarType::F32) return "D is stored as " + std::string(to_string(product.d.type)) + " (the tile writes bf16 or f32)";
  if (product.d.col_stride != 1) return "D is not row-major";
  if (product.has_c && (product.c.type != ScalarType::BF16 || product.c.col_stride != 1)) return "C is not row-major bf16";
  return "";
}

Launch emit_hopper_product(std::ostream& source, const HopperProductRequest& product) {
  if (const std::string reason = hopper_ineligible_reason(product); !reason.empty())
    throw std::invalid_argument(product.kernel + " cannot run on the sm_90a tile: " + reason);
  namespace h = oj::hopper;
  const bool mn_major = b_mn_major(product.b);
  HopperProductSpec spec;
  spec.b_mn_major = mn_major;
  spec.d_type = product.d.type;
  const int64_t tiles_m = (product.m + h::kTileM - 1) / h::kTileM, tiles_n = (product.n + h::kTileN - 1) / h::kTileN;
  const int64_t upper = tiles_m * (tiles_m + 1) / 2;
  // Bands of about √(tiles) rows: the CTAs running at once share A and B panels in L2.
  const int group = product.triangular ? triangular_group(static_cast<int>(tiles_m), std::min<int64_t>(upper, 132)) : 0;
  const char* d_tag = storage_tag(product.d.type);
  source << "// " << product.kernel << " = " << product.alpha << "·A·B" << (product.has_c ? " + " + std::to_string(product.beta) + "·C" : "")
         << (product.gamma != 0 ? " + " + std::to_string(product.gamma) + "·I" : "") << ": " << product.m << "x" << product.n << "x" << product.k
         << " on the sm_90a tile (TMA, wgmma, " << h::kStages << " stages), B " << (mn_major ? "MN" : "K") << "-major"
         << (product.triangular ? ", triangular (upper tiles in bands of " + std::to_string(group) + ")" : "") << "\n"
         << "#include \"orthojit_hopper_product.cuh\"\n"
         << "extern \"C\" __global__ void __launch_bounds__(" << h::kThreads << ", 1) " << product.kernel
         << "(const __grid_constant__ oj::hopper::TensorMap a_map, const __grid_constant__ oj::hopper::TensorMap b_map, const oj::u16* __restrict__ c, "
         << d_tag << "::storage* __restrict__ d) {\n"
         << "  const int z = static_cast<int>(blockIdx.z);  // the matrix of the batch\n"
         << "  if (c) c += static_cast<long long>(z) * " << ll(product.has_c ? product.c.matrix_stride : 0) << ";\n"
         << "  d += static_cast<long long>(z) * " << ll(product.d.matrix_stride) << ";\n"
         << "  int ti, tj;\n";
  if (product.triangular)
    source << "  oj::grouped_upper_tile(static_cast<int>(blockIdx.x), " << tiles_m << ", " << group << ", ti, tj);\n";
  else
    source << "  ti = static_cast<int>(blockIdx.y);\n  tj = static_cast<int>(blockIdx.x);\n";
  source << "  oj::hopper::product_tile<" << (mn_major ? "true" : "false") << ", " << (product.triangular ? "true" : "false") << ", " << d_tag
         << ", oj::Bf16>(a_map, b_map, c, d, " << product.m << ", " << product.n << ", " << product.k << ", "
         << (product.has_c ? product.c.row_stride : 0) << ", " << product.d.row_stride << ", " << literal(product.alpha) << ", "
         << literal(product.has_c ? product.beta : 0.0) << ", " << literal(product.gamma) << ", ti, tj, z);\n}\n\n";

  Launch launch;
  launch.kernel = product.kernel;
  if (product.triangular) {
    launch.grid[0] = upper;
  } else {
    launch.grid[0] = tiles_n;
    launch.grid[1] = tiles_m;
  }
  launch.grid[2] = product.batch;
  if (launch.grid[0] >= (int64_t{1} << 31) || launch.grid[1] > 65535)
    throw std::invalid_argument(product.kernel + ": " + std::to_string(tiles_m) + " x " + std::to_string(tiles_n) + " tiles exceed the grid limits");
  launch.block = static_cast<int>(h::kThreads);
  launch.dynamic_shared_bytes = static_cast<int>(h::kDynamicSharedBytes);
  auto batched = [&](TensorMapRequest request, const View& view) {
    request.dims[2] = static_cast<uint64_t>(product.batch);
    request.matrix_bytes = static_cast<uint64_t>(view.matrix_stride) * 2;
    return request;
  };
  launch.tensor_maps = {{product.a.slot, batched(hopper_a_map(product.m, product.k, product.a.row_stride), product.a)},
                        {product.b.slot, batched(hopper_b_map(spec, product.n, product.k, mn_major ? product.b.row_stride : product.b.col_stride), product.b)}};
  launch.args = {product.has_c ? product.c.slot : Slot{Slot::Kind::Buffer, -1}, product.d.slot};
  launch.summary = std::to_string(product.m) + "x" + std::to_string(product.n) + "x" + std::to_string(product.k) +
                   " sm_90a tile 128x128x64 (TMA + wgmma, " + std::to_string(h::kStages) + " stages, B " + (mn_major ? "MN" : "K") + "-major)" +
                   (product.triangular ? " triangular" : "");
  launch.m = product.m;
  launch.n = product.n;
  launch.k = product.k;
  launch.triangular = product.triangular;
  return launch;
}

}  // namespace orthojit::cuda
