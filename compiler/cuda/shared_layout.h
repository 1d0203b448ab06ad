// The shared-memory layout of a generated product kernel (mma_product_codegen.cpp and the device
// template kernels/cuda/orthojit_mma_product.cuh), as data: the index formulas of every shared
// access, each written once as an IndexExpr that the generator prints into the product's
// description (the functions the template calls) and that tests/cuda_bank_conflict_test.cpp
// evaluates on the host for every thread of every warp, counting the wavefronts each warp
// instruction needs. One formula, two uses: a layout change that brings a bank conflict fails the
// test.
//
// Layout (gemm_shared_plan): each operand's tile is stored as loaded, its contiguous dimension
// along rows padded by 8 halves (16 bytes):
//   A k-contiguous  [BM][BK + 8]   fragments by 32-bit loads (the MMA's row layout)
//   A m-contiguous  [BK][BM + 8]   fragments by ldmatrix.x4.trans
//   B k-contiguous  [BN][BK + 8]   fragments by 32-bit loads (the MMA's col layout)
//   B n-contiguous  [BK][BN + 8]   fragments by ldmatrix.x{2,4}.trans
// so every global -> shared move is a store of whole chunks (16 bytes, 4 or 2) along a row: no
// transposing 16-bit stores. Which thread moves which chunk (chunk_placement) is chosen so that
// the 8 (16-byte chunks) or 32 (4-byte) threads the hardware serves together hit distinct banks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_codegen.h"

namespace orthojit::cuda {

// A 32-bit integer index expression of the generated code: literals, named kernel constants
// (printed by name, evaluated by value: BK), variables (tid, lane, s, kk...), + - * / % ^.
class IndexExpr {
 public:
  IndexExpr(int64_t value = 0);  // NOLINT: literals convert
  static IndexExpr var(const std::string& name);
  static IndexExpr named(const std::string& name, int64_t value);
  std::string code() const;  // C++ text, parenthesized where needed
  // Throws std::invalid_argument naming a variable missing from `variables`.
  int64_t eval(const std::map<std::string, int64_t>& variables) const;
  friend IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) { return binary('+', a, b); }
  friend IndexExpr operator-(const IndexExpr& a, const IndexExpr& b) { return binary('-', a, b); }
  friend IndexExpr operator*(const IndexExpr& a, const IndexExpr& b) { return binary('*', a, b); }
  friend IndexExpr operator/(const IndexExpr& a, const IndexExpr& b) { return binary('/', a, b); }
  friend IndexExpr operator%(const IndexExpr& a, const IndexExpr& b) { return binary('%', a, b); }
  // Bitwise exclusive or (the swizzles), with C++'s precedence: below + and -, printed in
  // parentheses inside them.
  friend IndexExpr operator^(const IndexExpr& a, const IndexExpr& b) { return binary('^', a, b); }

 private:
  struct Node;
  static IndexExpr binary(char op, const IndexExpr& a, const IndexExpr& b);
  static IndexExpr wrap(std::shared_ptr<const Node> node);
  std::string code(int parent_precedence, bool right) const;
  std::shared_ptr<const Node> node_;
};

// `const int name = value;` lines of the generated code, in order (later ones may use earlier).
using Definitions = std::vector<std::pair<std::string, IndexExpr>>;
std::string definitions_code(const Definitions& definitions, const std::string& indent);
// Adds each definition's value to `variables`, in order.
void evaluate_definitions(const Definitions& definitions, std::map<std::string, int64_t>& variables);

// A 16-bit tile in shared memory, [rows][pitch] per stage (pitch = the stored row, padded).
struct SharedTile {
  std::string name;  // "As", "Bs"
  int rows = 0, cols = 0, pitch = 0;
  std::string shape() const;  // "[BK][BN + 8]"-style text of the generated declaration
};

// Which chunk of a tile thread-chunk index `e` moves: `locals` define `row` and `col` (the first
// element of the chunk, `width` halves along the row) from `e`.
struct ChunkPlacement {
  int width = 8;
  Definitions locals;
};
// Row-major (chunk e at row e / chunks, column e % chunks) when a row is 128 bytes or longer;
// for 64-byte rows (with the 80-byte padded pitch) rows r and r + 4 share each group of threads
// the hardware serves together, which puts them in opposite bank halves.
ChunkPlacement chunk_placement(const SharedTile& tile, int width);

// One shared access of the kernel, per thread: `bytes` at element (row, col) of `tile`, for every
// combination of `loops` (name and values), after `locals`. ldmatrix: the lanes 0..8·matrices-1
// give one 16-byte row address each, each matrix's 8 rows one wavefront at best.
struct SharedAccess {
  std::string what;  // "A tile store (cp.async, 16 B)"
  SharedTile tile;
  std::vector<std::pair<std::string, std::vector<int64_t>>> loops;
  Definitions locals;
  IndexExpr row, col;
  int bytes = 4;
  int ldmatrix_matrices = 0;  // 0: a plain load or store
};

// Everything the generator needs to print a product kernel's shared-memory side, and the test to
// check it. `va`, `vb`: the chunk widths (8, 2 or 1 halves) of A and B along their contiguous
// dimensions.
struct GemmSharedPlan {
  TileConfig tile;
  bool a_k_contiguous = true, b_k_contiguous = true;
  int va = 8, vb = 8;
  bool pipelined = false;  // cp.async stages (16-byte chunks of both operands, 2+ stages fit)
  int stages = 1;
  int stage_bytes = 0;
  SharedTile as, bs;
  Definitions thread;  // warp, lane, g, t, wrow, wcol from tid
  ChunkPlacement a_chunks, b_chunks;
  // The tile stores (cp.async or register stores of the chunks), and the fragment reads of one
  // k-step at offset kk: A's af[x][q] (q over the four registers, or one ldmatrix.x4 per x), B's
  // bf[y][q] (two 32-bit loads, or ldmatrix.x4 for y and y + 1, or .x2).
  SharedAccess a_store, b_store, a_read, b_read;
  bool b_ldmatrix_x4 = false;
  // A triangular product's mirror tile (mirror = true): after the main loop the operand stages
  // hold Ms [BN][BM], the tile's rounded values transposed (Ms[j][i] = D[row0 + i][col0 + j]),
  // 16-byte chunks XOR-swizzled along the rows instead of padded (chunk c of row r at chunk
  // c ^ (2·(r / 8) mod BM/8)). The epilogue writes it from the accumulator (mirror_store: lane
  // (g, t) after quad_transpose holds 8 columns of one row, written as 8 16-bit values down Ms's
  // columns) and reads it back by rows (mirror_read: one 16-byte chunk per thread and step), so
  // the mirrored tile goes to D's lower triangle as whole 16-byte stores, coalesced, instead of
  // one 2-byte store per element down a column. Rows r and r + 8 of one store instruction would
  // share banks in any 16-byte-aligned pitch; the swizzle moves them to the other chunk pair.
  bool mirror = false;
  SharedTile ms;
  SharedAccess mirror_store, mirror_read;
  int mirror_bytes = 0;
  std::vector<SharedAccess> accesses() const {
    std::vector<SharedAccess> all = {a_store, b_store, a_read, b_read};
    if (mirror) all.insert(all.end(), {mirror_store, mirror_read});
    return all;
  }
};
// `mirror`: plan the mirror tile too (a triangular product, square tile, 16-bit D, the warp tile's
// columns in pairs of 8-column fragments); it must fit in the stage memory (mirror_fits).
GemmSharedPlan gemm_shared_plan(const TileConfig& tile, bool a_k_contiguous, bool b_k_contiguous, int va, int vb, bool mirror = false);
// Whether a plan's mirror tile fits in the memory its operand stages take (the epilogue reuses it).
bool mirror_fits(const GemmSharedPlan& plan);
// Whether a tile can mirror through the mirror tile: square, whole 16-row blocks, and BM/8 chunks
// a power of two, because the swizzle XORs chunk indices (a permutation of [0, 2^n) only: with 12
// chunks, 8 ^ 4 = 12 would land in the next row). Other tiles mirror element by element.
bool mirror_tile_supported(const TileConfig& tile);
// The physical column of logical element (row, col) of the mirror tile: the swizzle above.
IndexExpr mirror_column(const IndexExpr& row, const IndexExpr& col, int tile_cols);

}  // namespace orthojit::cuda
