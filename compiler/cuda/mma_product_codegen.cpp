// The generated program's products on the mma.sync tile (see mma_product_codegen.h).
#include "cuda/mma_product_codegen.h"

#include <algorithm>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "cuda/shared_layout.h"
#include "cuda/tile_schedule.h"
#include "ir/muon_step.h"
#include "support/scalar_type.h"

namespace orthojit::cuda {
namespace {

const char* flag(bool value) { return value ? "true" : "false"; }

// Chunks of V consecutive elements along the operand's contiguous dimension: 16-byte loads (V = 8)
// when the extent and every stride allow, else pairs, else single values, so that a chunk is
// wholly inside or outside the matrix and aligned.
int vector_width(const View& view, bool k_contiguous, int64_t contiguous_extent) {
  const int64_t other_stride = k_contiguous ? (view.col_stride == 1 ? view.row_stride : view.col_stride) : (view.row_stride == 1 ? view.col_stride : view.row_stride);
  for (int width : {8, 2})
    if (contiguous_extent % width == 0 && other_stride % width == 0 && view.matrix_stride % width == 0) return width;
  return 1;
}

// A function of the description that computes one shared access's (row, col) from the thread's
// Position and the loop variables `parameters` (the names the access's formulas use). Only the
// Position fields the formulas read are unpacked (no unused variables in the generated code).
std::string access_function(const char* name, const char* result, const std::string& parameters, const SharedAccess& access, const std::string& returned) {
  std::string formulas = returned;
  for (const auto& [local, value] : access.locals) formulas += " " + value.code();
  formulas += " " + access.row.code() + " " + access.col.code();
  std::string unpack;
  for (const char* field : {"tid", "warp", "lane", "g", "t", "wrow", "wcol"})
    if (std::regex_search(formulas, std::regex(std::string("\\b") + field + "\\b"))) unpack += std::string("    const int ") + field + " = p." + field + ";\n";
  return std::string("  // ") + access.what + "\n  static __device__ __forceinline__ oj::mma::" + result + " " + name + "(const oj::mma::Position& p" + parameters + ") {\n" +
         unpack + definitions_code(access.locals, "    ") + "    return {" + returned + "};\n  }\n";
}

}  // namespace

Launch emit_mma_product(std::ostream& source, const MmaProductRequest& product) {
  const View &a = product.a, &b = product.b, &c = product.c, &out = product.d;
  const TileConfig& tile = product.tile;
  const int64_t m = product.m, n = product.n, k = product.k;
  const bool triangular = product.triangular, has_c = product.has_c;
  if (const std::string reason = tile.invalid_reason(); !reason.empty() || tile.sm90a)
    throw std::invalid_argument(product.kernel + ": tile " + tile.label() + " cannot run on the mma.sync kernel: " + (reason.empty() ? "it is the sm_90a tile" : reason));
  if (triangular && tile.bm != tile.bn) throw std::invalid_argument(product.kernel + ": a triangular product needs a square tile, not " + tile.label());
  if (triangular && product.fused_update) throw std::logic_error("cuda codegen: a fused Muon update on a triangular product");
  const int64_t tiles_m = (m + tile.bm - 1) / tile.bm, tiles_n = (n + tile.bn - 1) / tile.bn;
  // 32-bit index arithmetic when every per-matrix offset fits (64-bit addresses cost registers:
  // 255 and spills for the 128x128 tile, against well under 200 with int offsets).
  const bool narrow = std::max({a.matrix_stride, b.matrix_stride, out.matrix_stride, c.matrix_stride, m * k, k * n, m * n}) < (int64_t{1} << 31);
  const bool a_k_contiguous = a.col_stride == 1;
  const bool b_k_contiguous = b.row_stride == 1;
  const int wm = tile.bm / tile.warps_m, wn = tile.bn / tile.warps_n;
  const int va = vector_width(a, a_k_contiguous, a_k_contiguous ? k : m);
  const int vb = vector_width(b, b_k_contiguous, b_k_contiguous ? k : n);
  if ((tile.bm * tile.bk / va) % tile.threads() != 0 || (tile.bn * tile.bk / vb) % tile.threads() != 0)
    throw std::invalid_argument("tile " + tile.label() + ": the tile's chunks do not divide evenly among its threads");
  // The shared tiles, who moves which chunk and every index formula of a shared access
  // (shared_layout.h). A triangular product writes its mirrored tile through shared memory (the
  // mirror tile) where D is 16-bit and row-major in whole 16-byte chunks and the tile reuses the
  // cp.async stages; elsewhere each element's mirror is a 2-byte store.
  const bool d_vectorizable = product.vector_epilogue && !product.fused_update && is_16bit(out.type) && out.col_stride == 1 && out.row_stride % 8 == 0 &&
                              out.matrix_stride % 8 == 0 && n % 8 == 0 && (wn / 8) % 2 == 0;
  GemmSharedPlan plan = gemm_shared_plan(tile, a_k_contiguous, b_k_contiguous, va, vb, triangular && d_vectorizable && mirror_tile_supported(tile));
  if (plan.mirror && !(plan.pipelined && mirror_fits(plan))) plan = gemm_shared_plan(tile, a_k_contiguous, b_k_contiguous, va, vb);
  const bool shared_mirror = plan.mirror;
  const bool vector_d = shared_mirror || (d_vectorizable && !triangular);
  const bool vector_c = vector_d && has_c && is_16bit(c.type) && c.col_stride == 1 && c.row_stride % 8 == 0 && c.matrix_stride % 8 == 0;
  // The persistent schedule of a triangular product (tile_schedule.h): one wave of CTAs, each
  // taking work items (matrix, upper tile) in the grouped order. The launch asks the driver how
  // many CTAs one SM holds (Launch::ctas); the band height only needs the wave's rough size, so
  // here registers are estimated at 128 per thread (ptxas gives 64x64 tiles about that, 128x128
  // ones ~210: their bands come out √2 taller than the real wave's best, a locality detail).
  const int64_t work_items = triangular ? tiles_m * (tiles_m + 1) / 2 * product.batch : 0;
  const int shared_bytes = plan.pipelined ? plan.stages * plan.stage_bytes : plan.stage_bytes;
  const int64_t estimated_wave = triangular ? persistent_ctas(work_items, product.multiprocessors, resident_ctas_per_sm(tile.threads(), shared_bytes, 128)) : 0;
  const TriangularOrder order{static_cast<int>(tiles_m), triangular_group(static_cast<int>(tiles_m), estimated_wave)};
  if (work_items >= (int64_t{1} << 31)) throw std::invalid_argument(product.kernel + ": " + std::to_string(work_items) + " tiles in one launch (at most 2^31 - 1)");

  // The description the device template (orthojit_mma_product.cuh) is instantiated with.
  const std::string shape = product.kernel + "_product";
  const char* d_tag = storage_tag(out.type);
  std::ostringstream p;
  p << "struct " << shape << " {\n"
    << "  static constexpr int M = " << m << ", N = " << n << ", K = " << k << ";\n"
    << "  static constexpr int BM = " << tile.bm << ", BN = " << tile.bn << ", BK = " << tile.bk << ", WM = " << wm << ", WN = " << wn
    << ", WARPS_N = " << tile.warps_n << ", THREADS = " << tile.threads() << ";\n"
    << "  static constexpr int VA = " << va << ", VB = " << vb << ", STAGES = " << plan.stages << ";\n"
    << "  static constexpr int AS_ROWS = " << plan.as.rows << ", AS_PITCH = " << plan.as.pitch << ", BS_ROWS = " << plan.bs.rows << ", BS_PITCH = " << plan.bs.pitch << ";\n"
    << "  static constexpr bool BF16 = " << flag(a.type == ScalarType::BF16) << ", A_K_CONTIGUOUS = " << flag(a_k_contiguous) << ", B_K_CONTIGUOUS = " << flag(b_k_contiguous)
    << ", PIPELINED = " << flag(plan.pipelined) << ", B_LDMATRIX_X4 = " << flag(plan.b_ldmatrix_x4) << ";\n"
    << "  static constexpr bool TRIANGULAR = " << flag(triangular) << ", HAS_C = " << flag(has_c) << ", HAS_GAMMA = " << flag(product.gamma != 0)
    << ", VECTOR_D = " << flag(vector_d) << ", VECTOR_C = " << flag(vector_c) << ", SHARED_MIRROR = " << flag(shared_mirror)
    << ", FUSED_UPDATE = " << flag(product.fused_update) << ";\n"
    << "  typedef " << (narrow ? "int" : "long long") << " Index;\n"
    << "  static constexpr Index A_ROW_STRIDE = " << a.row_stride << ", A_COL_STRIDE = " << a.col_stride << ", B_ROW_STRIDE = " << b.row_stride
    << ", B_COL_STRIDE = " << b.col_stride << ";\n"
    << "  static constexpr Index C_ROW_STRIDE = " << (has_c ? c.row_stride : 0) << ", C_COL_STRIDE = " << (has_c ? c.col_stride : 0)
    << ", D_ROW_STRIDE = " << out.row_stride << ", D_COL_STRIDE = " << out.col_stride << ";\n"
    << "  static constexpr long long A_MATRIX = " << ll(a.matrix_stride) << ", B_MATRIX = " << ll(b.matrix_stride) << ", C_MATRIX = " << ll(has_c ? c.matrix_stride : 0)
    << ", OUT_MATRIX = " << ll(product.fused_update ? ir::kMuonStepWords : out.matrix_stride) << ";\n"
    << "  static constexpr float ALPHA = " << literal(product.alpha) << ", BETA = " << literal(has_c ? product.beta : 0.0) << ", GAMMA = " << literal(product.gamma) << ";\n"
    << "  typedef " << (has_c ? storage_tag(c.type) : "oj::F32") << " CTag;\n  typedef " << d_tag << " DTag;\n";
  if (triangular)
    p << "  static constexpr int TILES_T = " << order.tiles << ", GROUP = " << order.group << ", UPPER = " << order.upper_tiles() << ", WORK = " << work_items << ";\n";
  p << "  static __device__ __forceinline__ oj::mma::Position position(int tid) {\n"
    << definitions_code(plan.thread, "    ") << "    return {tid, warp, lane, g, t, wrow, wcol};\n  }\n"
    << access_function("a_store", "At", ", int s", plan.a_store, plan.a_store.row.code() + ", " + plan.a_store.col.code())
    << access_function("b_store", "At", ", int s", plan.b_store, plan.b_store.row.code() + ", " + plan.b_store.col.code())
    << access_function("a_read", "At", ", int kk, int x, int q", plan.a_read, plan.a_read.row.code() + ", " + plan.a_read.col.code())
    << access_function("b_read", "At", ", int kk, int y, int q", plan.b_read, plan.b_read.row.code() + ", " + plan.b_read.col.code());
  if (shared_mirror)
    p << access_function("mirror_store", "At", ", int x, int y, int w", plan.mirror_store, plan.mirror_store.row.code() + ", " + plan.mirror_store.col.code())
      << access_function("mirror_read", "MirrorAt", ", int s", plan.mirror_read,
                         "mr, mc, " + plan.mirror_read.row.code() + ", " + plan.mirror_read.col.code());
  if (product.fused_update)
    p << "  // The Muon step's update of element (i, j) from its value v.\n"
      << "  static __device__ __forceinline__ void update(const oj::u64* io, int i, int j, float v) {\n" << product.update_statements << "  }\n";
  p << "};\n";

  const std::string c_pointer = has_c ? std::string("const ") + storage_tag(c.type) + "::storage*" : std::string("const float*");
  const std::string out_pointer = product.fused_update ? std::string("const oj::u64*") : std::string(d_tag) + "::storage*";
  source << "// " << product.kernel << " = " << product.alpha << "·A·B" << (has_c ? " + " + std::to_string(product.beta) + "·C" : "")
         << (product.gamma != 0 ? " + " + std::to_string(product.gamma) + "·I" : "") << ": " << m << "x" << n << "x" << k
         << (triangular ? ", triangular (persistent, bands of " + std::to_string(order.group) + " tile rows" + (shared_mirror ? ", mirror through shared memory)" : ")") : "")
         << ", tile " << tile.label() << "\n"
         << "#include \"orthojit_mma_product.cuh\"\n"
         << p.str()
         << "extern \"C\" __global__ void __launch_bounds__(" << tile.threads() << ") " << product.kernel << "(const oj::u16* __restrict__ a_all, const oj::u16* __restrict__ b_all, "
         << c_pointer << " __restrict__ c_all, " << out_pointer << " __restrict__ " << (product.fused_update ? "args" : "d_all") << ") {\n"
         << "  oj::mma::product<" << shape << ">(a_all, b_all, c_all, " << (product.fused_update ? "args" : "d_all") << ");\n}\n\n";

  Launch launch;
  launch.kernel = product.kernel;
  if (triangular) {
    launch.grid[0] = work_items;
    launch.persistent = true;
  } else {
    launch.grid[0] = tiles_n;
    launch.grid[1] = tiles_m;
    launch.grid[2] = product.batch;
  }
  launch.block = tile.threads();
  launch.shared_bytes = shared_bytes;
  launch.args = {a.slot, b.slot, has_c ? c.slot : Slot{Slot::Kind::Buffer, -1}, product.fused_update ? Slot{Slot::Kind::StepArgs, -1} : out.slot};
  launch.summary = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " tile " + tile.label() +
                   (triangular ? std::string(" triangular, persistent") + (shared_mirror ? ", shared-memory mirror" : "") : std::string()) +
                   (plan.pipelined ? ", cp.async x" + std::to_string(plan.stages) : ", register-staged");
  launch.m = m;
  launch.n = n;
  launch.k = k;
  launch.triangular = triangular;
  launch.tile = tile;
  return launch;
}

}  // namespace orthojit::cuda
