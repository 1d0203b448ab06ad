// Where the CTAs of a symmetric (triangular) product go: the persistent tile schedule, as host
// code. The generated kernel runs the same decode on the device (oj::grouped_upper_tile in
// kernels/cuda/orthojit_device.cuh); tests/cuda_tile_schedule_test.cpp checks the two agree for
// every index, that every upper tile is visited exactly once, and what the order buys in reuse.
//
// A symmetric product D = A·Aᵀ-like (or A·A with A symmetric) of T x T tiles needs only the
// T(T+1)/2 tiles (ti, tj) with ti <= tj; tile (ti, tj) reads the row panel ti of the left operand
// and the column panel tj of the right. A persistent kernel launches about one wave of CTAs and
// each takes work items index = blockIdx.x, blockIdx.x + gridDim.x, ... (batch-major: item w is
// matrix w / T(T+1)/2), so the CTAs running at once hold consecutive items. The order of the
// upper triangle decides how many panels those share in L2. Column by column (the first design,
// oj::upper_tile) a wave on a large product covers whole columns: every row panel 0..tj. Grouped
// as Triton groups its GEMM tiles (GROUP_SIZE_M, "L2 cache optimizations" of Triton's matmul
// tutorial, https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html)
// and as QuACK's symmetric GEMM orders its persistent tiles: bands of G tile rows, each band
// swept along its columns (the band's triangle first, then its rectangle), so a wave touches G
// row panels and about wave/G column panels. Counted by panels_in_wave (the test): a 8192-row
// product in 64-row tiles (T = 128) with 264 CTAs touches 33 panels per wave on average in bands
// of 16, 87 column by column.
#pragma once

#include <cstdint>
#include <utility>

#include "cuda/cuda_codegen.h"

namespace orthojit::cuda {

struct TriangularOrder {
  int tiles = 1;  // T: tiles along each side
  int group = 8;  // G: tile rows per band (the last band may be shorter)
  int64_t upper_tiles() const { return int64_t{tiles} * (tiles + 1) / 2; }
  // The index-th tile of the order (0 <= index < upper_tiles()): (ti, tj) with ti <= tj.
  std::pair<int, int> tile(int64_t index) const;
};

// The band height for T tiles and a wave of `wave` CTAs: about √wave, so that a wave's tiles form
// a near-square block of the triangle and touch about 2√wave panels (a band of G rows touches G +
// wave/G, least at G = √wave); at most T (one band: the column order).
int triangular_group(int tiles, int64_t wave);

// How many CTAs of a product kernel with `threads` threads, `shared_bytes` of shared memory and
// about `registers` per thread one SM of compute capability 8.0/9.0 keeps resident (64K registers,
// 2048 threads, 32 CTAs, up to 227 KiB of shared memory per SM; CUDA C++ Programming Guide,
// "Compute Capabilities", table of technical specifications), at least 1.
int resident_ctas_per_sm(int threads, int shared_bytes, int registers);

// The persistent grid of a triangular product: one wave (multiprocessors x resident CTAs), never
// more CTAs than work items.
int64_t persistent_ctas(int64_t work_items, int multiprocessors, int resident_per_sm);

// The number of distinct operand panels that the items [first, first + wave) of `order` read (tile
// (ti, tj) reads panels ti and tj of the one matrix both operands come from): what the CTAs
// running at once keep in L2.
int64_t panels_in_wave(const TriangularOrder& order, int64_t first, int64_t wave);

}  // namespace orthojit::cuda
