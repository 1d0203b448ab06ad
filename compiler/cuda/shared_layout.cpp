// The product kernels' shared-memory layout (see shared_layout.h).
#include "cuda/shared_layout.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace orthojit::cuda {

struct IndexExpr::Node {
  enum class Kind { Literal, Named, Var, Binary } kind = Kind::Literal;
  int64_t value = 0;
  std::string name;
  char op = 0;
  std::shared_ptr<const Node> left, right;  // operands of a Binary node
};

IndexExpr IndexExpr::wrap(std::shared_ptr<const Node> node) {
  IndexExpr expr;
  expr.node_ = std::move(node);
  return expr;
}

IndexExpr::IndexExpr(int64_t value) {
  auto node = std::make_shared<Node>();
  node->value = value;
  node_ = node;
}

IndexExpr IndexExpr::var(const std::string& name) {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::Var;
  node->name = name;
  IndexExpr expr;
  expr.node_ = node;
  return expr;
}

IndexExpr IndexExpr::named(const std::string& name, int64_t value) {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::Named;
  node->name = name;
  node->value = value;
  IndexExpr expr;
  expr.node_ = node;
  return expr;
}

IndexExpr IndexExpr::binary(char op, const IndexExpr& a, const IndexExpr& b) {
  auto node = std::make_shared<Node>();
  node->kind = Node::Kind::Binary;
  node->op = op;
  node->left = a.node_;
  node->right = b.node_;
  IndexExpr expr;
  expr.node_ = node;
  return expr;
}

std::string IndexExpr::code() const { return code(0, false); }

std::string IndexExpr::code(int parent_precedence, bool right) const {
  switch (node_->kind) {
    case Node::Kind::Literal: return std::to_string(node_->value);
    case Node::Kind::Named:
    case Node::Kind::Var: return node_->name;
    case Node::Kind::Binary: break;
  }
  const int precedence = node_->op == '^' ? 1 : node_->op == '+' || node_->op == '-' ? 2 : 3;
  // C++'s left-to-right grouping: a right operand of equal precedence needs parentheses
  // (a * (b / c) is not a * b / c in integers).
  const std::string text = wrap(node_->left).code(precedence, false) + " " + node_->op + " " + wrap(node_->right).code(precedence, true);
  return precedence < parent_precedence || (right && precedence == parent_precedence) ? "(" + text + ")" : text;
}

int64_t IndexExpr::eval(const std::map<std::string, int64_t>& variables) const {
  switch (node_->kind) {
    case Node::Kind::Literal:
    case Node::Kind::Named: return node_->value;
    case Node::Kind::Var: {
      const auto found = variables.find(node_->name);
      if (found == variables.end()) throw std::invalid_argument("index expression: no value for '" + node_->name + "'");
      return found->second;
    }
    case Node::Kind::Binary: break;
  }
  const int64_t a = wrap(node_->left).eval(variables), b = wrap(node_->right).eval(variables);
  switch (node_->op) {
    case '+': return a + b;
    case '-': return a - b;
    case '^': return a ^ b;
    case '*': return a * b;
    case '/':
    case '%':
      if (b == 0) throw std::invalid_argument("index expression: division by zero in " + code());
      return node_->op == '/' ? a / b : a % b;  // C++ semantics, as on the device
  }
  throw std::logic_error("index expression: unknown operator");
}

std::string definitions_code(const Definitions& definitions, const std::string& indent) {
  std::string text;
  for (const auto& [name, value] : definitions) text += indent + "const int " + name + " = " + value.code() + ";\n";
  return text;
}

void evaluate_definitions(const Definitions& definitions, std::map<std::string, int64_t>& variables) {
  for (const auto& [name, value] : definitions) variables[name] = value.eval(variables);
}

std::string SharedTile::shape() const { return "[" + std::to_string(rows) + "][" + std::to_string(cols) + " + " + std::to_string(pitch - cols) + "]"; }

ChunkPlacement chunk_placement(const SharedTile& tile, int width) {
  using E = IndexExpr;
  const E e = E::var("e"), w = E(width);
  const int chunks = tile.cols / width, bytes = 2 * width;
  ChunkPlacement placement;
  placement.width = width;
  // The hardware serves a warp's shared access in groups of threads that together ask for at
  // most 128 bytes: 8 threads for 16-byte accesses, 16 for 8-byte ones, all 32 for 4 bytes and
  // less (NVIDIA's CUDA C++ Programming Guide, "Shared Memory" under compute capability 5.x and
  // later; the quarter-warp phases of 128-bit accesses). With 64-byte rows (BK or BN of 32) and
  // the 80-byte pitch (5 groups of 16 bytes, odd), rows r and r + 4 lie 320 bytes apart: 64 mod
  // 128, the other half of the banks. So each group of threads takes the whole of row 8·b + q
  // and of row 8·b + q + 4 (q the group within 8 rows, b the block of 8 rows) instead of rows
  // 2q and 2q + 1, which share banks 0-3 (80 mod 128 = 16 bytes of overlap). A warp still moves
  // the same whole rows, so the global side stays coalesced.
  const int per_group = bytes == 16 ? 8 : bytes == 8 ? 16 : 32;
  if (tile.cols * 2 == 64 && (bytes == 16 || bytes == 4) && tile.rows % 8 == 0 && ((tile.pitch * 2 / 16) % 2 == 1)) {
    const E block = E(8 * chunks);
    placement.locals = {{"u", e % block},
                        {"v", E::var("u") % E(per_group)},
                        {"row", e / block * E(8) + E::var("u") / E(per_group) + E::var("v") / E(chunks) * E(4)},
                        {"col", E::var("v") % E(chunks) * w}};
  } else {
    placement.locals = {{"row", e / E(chunks)}, {"col", e % E(chunks) * w}};
  }
  return placement;
}

bool mirror_tile_supported(const TileConfig& tile) {
  const int chunks = tile.bm / 8;
  return tile.bm == tile.bn && tile.bm % 16 == 0 && (chunks & (chunks - 1)) == 0;
}

IndexExpr mirror_column(const IndexExpr& row, const IndexExpr& col, int tile_cols) {
  using E = IndexExpr;
  const int chunks = tile_cols / 8;
  return ((col / E(8)) ^ (row / E(8) * E(2) % E(chunks))) * E(8) + col % E(8);
}

bool mirror_fits(const GemmSharedPlan& plan) { return plan.mirror && plan.mirror_bytes <= plan.stages * plan.stage_bytes; }

GemmSharedPlan gemm_shared_plan(const TileConfig& tile, bool a_k_contiguous, bool b_k_contiguous, int va, int vb, bool mirror) {
  using E = IndexExpr;
  GemmSharedPlan plan;
  plan.tile = tile;
  plan.a_k_contiguous = a_k_contiguous;
  plan.b_k_contiguous = b_k_contiguous;
  plan.va = va;
  plan.vb = vb;
  // Stored as loaded: rows along the non-contiguous dimension, padded by 8 halves (16 bytes: keeps
  // 16-byte alignment and shifts consecutive rows by 4 banks).
  auto stored = [](const char* name, int rows, int cols) { return SharedTile{name, rows, cols, cols + 8}; };
  plan.as = a_k_contiguous ? stored("As", tile.bm, tile.bk) : stored("As", tile.bk, tile.bm);
  plan.bs = b_k_contiguous ? stored("Bs", tile.bn, tile.bk) : stored("Bs", tile.bk, tile.bn);
  plan.stage_bytes = (plan.as.rows * plan.as.pitch + plan.bs.rows * plan.bs.pitch) * 2;
  // cp.async (sm_80+) needs 16-byte chunks of both operands and two stages within the 48 KiB of
  // static shared memory; three when they fit.
  plan.stages = std::min(3, 48 * 1024 / plan.stage_bytes);
  plan.pipelined = va == 8 && vb == 8 && plan.stages >= 2;
  if (!plan.pipelined) plan.stages = 1;

  const E tid = E::var("tid"), lane = E::var("lane"), warp = E::var("warp"), g = E::var("g"), t = E::var("t");
  const int wm = tile.bm / tile.warps_m, wn = tile.bn / tile.warps_n;
  plan.thread = {{"warp", tid / E(32)},
                 {"lane", tid % E(32)},
                 {"g", lane / E(4)},
                 {"t", lane % E(4)},
                 {"wrow", warp / E::named("WARPS_N", tile.warps_n) * E::named("WM", wm)},
                 {"wcol", warp % E::named("WARPS_N", tile.warps_n) * E::named("WN", wn)}};
  plan.a_chunks = chunk_placement(plan.as, va);
  plan.b_chunks = chunk_placement(plan.bs, vb);

  const int threads = tile.threads();
  auto store = [&](const char* operand, const SharedTile& shared, const ChunkPlacement& chunks) {
    SharedAccess access;
    const int per_thread = shared.rows * shared.cols / chunks.width / threads;
    access.what = std::string(operand) + " tile store (" + (plan.pipelined ? "cp.async" : "register") + ", " + std::to_string(2 * chunks.width) + " B)";
    access.tile = shared;
    std::vector<int64_t> s;
    for (int i = 0; i < per_thread; ++i) s.push_back(i);
    access.loops = {{"s", s}};
    access.locals = {{"e", tid + E::var("s") * E::named("THREADS", threads)}};
    access.locals.insert(access.locals.end(), chunks.locals.begin(), chunks.locals.end());
    access.row = E::var("row");
    access.col = E::var("col");
    access.bytes = 2 * chunks.width;
    return access;
  };
  plan.a_store = store("A", plan.as, plan.a_chunks);
  plan.b_store = store("B", plan.bs, plan.b_chunks);

  std::vector<int64_t> k_steps, xs, ys, ys2;
  for (int k = 0; k < tile.bk; k += 16) k_steps.push_back(k);
  for (int x = 0; x < wm / 16; ++x) xs.push_back(x);
  for (int y = 0; y < wn / 8; ++y) ys.push_back(y);
  for (int y = 0; y < wn / 8; y += 2) ys2.push_back(y);
  const E kk = E::var("kk"), x = E::var("x"), y = E::var("y"), q = E::var("q");
  SharedAccess& ar = plan.a_read;
  ar.tile = plan.as;
  if (a_k_contiguous) {
    // af[x][q] = A[r + 8·(q % 2)][kk + 2t + 8·(q / 2)], r = wrow + 16x + g: the m16n8k16 A
    // fragment (orthojit_device_primitives.cuh), one 32-bit pair per register.
    ar.what = "A fragment loads (32-bit)";
    ar.loops = {{"kk", k_steps}, {"x", xs}, {"q", {0, 1, 2, 3}}};
    ar.row = E::var("wrow") + x * E(16) + g + q % E(2) * E(8);
    ar.col = kk + E(2) * t + q / E(2) * E(8);
    ar.bytes = 4;
  } else {
    // ldmatrix.x4.trans on k rows of m: matrix j (lanes 8j..8j+7) is k rows kk + 8·(j / 2) + i of
    // the 8 m columns wrow + 16x + 8·(j % 2); .trans hands lane (g, t) the pairs A[m0 + g][k0 + 2t..],
    // so r[0..3] are the A fragment's registers in order.
    ar.what = "A fragment loads (ldmatrix.x4.trans)";
    ar.loops = {{"kk", k_steps}, {"x", xs}};
    ar.row = kk + lane / E(16) * E(8) + lane % E(8);
    ar.col = E::var("wrow") + x * E(16) + lane / E(8) % E(2) * E(8);
    ar.bytes = 16;
    ar.ldmatrix_matrices = 4;
  }
  SharedAccess& br = plan.b_read;
  br.tile = plan.bs;
  if (b_k_contiguous) {
    // bf[y][q] = B[kk + 2t + 8q][c] stored at Bs[c][...], c = wcol + 8y + g (the MMA's col layout).
    br.what = "B fragment loads (32-bit)";
    br.loops = {{"kk", k_steps}, {"y", ys}, {"q", {0, 1}}};
    br.row = E::var("wcol") + y * E(8) + g;
    br.col = kk + E(2) * t + q * E(8);
    br.bytes = 4;
  } else if ((wn / 8) % 2 == 0) {
    // Lanes 0-15 address the 16 k rows of columns wcol + 8y (lanes 0-7 the first 8x8 matrix, 8-15
    // the second), lanes 16-31 those of columns wcol + 8(y + 1): two fragments per instruction.
    plan.b_ldmatrix_x4 = true;
    br.what = "B fragment loads (ldmatrix.x4.trans)";
    br.loops = {{"kk", k_steps}, {"y", ys2}};
    br.row = kk + lane % E(16);
    br.col = E::var("wcol") + (y + lane / E(16)) * E(8);
    br.bytes = 16;
    br.ldmatrix_matrices = 4;
  } else {
    br.what = "B fragment loads (ldmatrix.x2.trans)";
    br.loops = {{"kk", k_steps}, {"y", ys}};
    br.row = kk + lane % E(16);
    br.col = E::var("wcol") + y * E(8);
    br.bytes = 16;
    br.ldmatrix_matrices = 2;
  }
  if (mirror) {
    if (!mirror_tile_supported(tile) || (wn / 8) % 2 != 0)
      throw std::invalid_argument("tile " + tile.label() + ": the mirror tile needs a square tile of whole 16-row blocks, a power of two of 8-column "
                                  "chunks (its swizzle) and pairs of 8-column fragments per warp");
    plan.mirror = true;
    plan.ms = SharedTile{"Ms", tile.bn, tile.bm, tile.bm};
    plan.mirror_bytes = tile.bn * tile.bm * 2;
    // From the accumulator after quad_transpose: lane (g, t) holds row il = wrow + 16x + g +
    // 8(t % 2) of the tile, columns jl0 + w (w = 0..7) with jl0 = wcol + 8(y + t / 2); element
    // (il, jl0 + w) goes to Ms[jl0 + w][il], one 16-bit store per w.
    SharedAccess& ms_store = plan.mirror_store;
    ms_store.what = "mirror tile store (16-bit, transposed)";
    ms_store.tile = plan.ms;
    std::vector<int64_t> ws = {0, 1, 2, 3, 4, 5, 6, 7};
    ms_store.loops = {{"x", xs}, {"y", ys2}, {"w", ws}};
    ms_store.locals = {{"il", E::var("wrow") + x * E(16) + g + t % E(2) * E(8)}, {"jl", E::var("wcol") + (y + t / E(2)) * E(8) + E::var("w")}};
    ms_store.row = E::var("jl");
    ms_store.col = mirror_column(E::var("jl"), E::var("il"), tile.bm);
    ms_store.bytes = 2;
    // Back by rows: thread-chunk e is row e / (BM / 8), logical chunk e % (BM / 8).
    SharedAccess& ms_read = plan.mirror_read;
    ms_read.what = "mirror tile read (16 B)";
    ms_read.tile = plan.ms;
    std::vector<int64_t> s;
    for (int i = 0; i < tile.bn * tile.bm / 8 / threads; ++i) s.push_back(i);
    ms_read.loops = {{"s", s}};
    ms_read.locals = {{"e", tid + E::var("s") * E::named("THREADS", threads)}, {"mr", E::var("e") / E(tile.bm / 8)}, {"mc", E::var("e") % E(tile.bm / 8) * E(8)}};
    ms_read.row = E::var("mr");
    ms_read.col = mirror_column(E::var("mr"), E::var("mc"), tile.bm);
    ms_read.bytes = 16;
  }
  return plan;
}

}  // namespace orthojit::cuda
