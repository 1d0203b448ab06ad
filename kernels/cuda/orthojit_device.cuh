// orthojit's device vocabulary, composed from the primitives (orthojit_device_primitives.cuh):
// warp-level helpers (quad_transpose), the triangular tile schedule, and the fused small-matrix
// kernel's CTA product. Generated kernels include this header; the per-op product tile lives in
// orthojit_mma_product.cuh (pre-Hopper mma.sync) and orthojit_hopper_product.cuh (sm_90a). The
// host emulation compiles this file as it is, over its own primitives.
#pragma once

#include "orthojit_device_primitives.cuh"

namespace oj {

// The 4x4 transpose of one 32-bit value per (lane of a quad, slot): the lanes 4g..4g+3 each hold
// v[0..3]; afterwards lane t holds in v[w] what lane w held in v[t]. In round r lane t sends its
// v[t ^ r] and keeps what lane t ^ r sent, which is that lane's v[t]. The slots are chosen by
// selects, not by a run-time index (which would put v in local memory). Every lane of the warp
// must call it (shfl.sync). The m16n8 accumulator gives a lane two columns of a row; this gives
// one lane 8 consecutive columns of a row instead, for 16-byte epilogue loads and stores.
__device__ __forceinline__ void quad_transpose(u32* v) {
  const int t = static_cast<int>(threadIdx.x) & 3;
#pragma unroll
  for (int r = 1; r < 4; ++r) {
    const int s = t ^ r;
    const u32 sent = s == 0 ? v[0] : s == 1 ? v[1] : s == 2 ? v[2] : v[3];
    const u32 got = shfl_xor(sent, r);
    v[0] = s == 0 ? got : v[0];
    v[1] = s == 1 ? got : v[1];
    v[2] = s == 2 ? got : v[2];
    v[3] = s == 3 ? got : v[3];
  }
}


// A warp's FM x FN mma.sync accumulators (m16n8: 4 f32 per lane each) set to zero; fully
// unrolled, so they stay in registers. Both product loops start from it: the fused kernel's
// cta_product below and the per-op tile (orthojit_mma_product.cuh).
template <int FM, int FN>
__device__ __forceinline__ void zero_accumulators(float (&acc)[FM][FN][4]) {
#pragma unroll
  for (int x = 0; x < FM; ++x)
#pragma unroll
    for (int y = 0; y < FN; ++y)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[x][y][q] = 0.0f;
}

// The persistent schedule of a triangular product (compiler/cuda/tile_schedule.h, the same steps
// on the host, checked against this one): the index-th upper tile (ti <= tj) of a T x T tile grid
// in bands of G tile rows, each band's triangle column by column, then its rectangle G tiles per
// column. Loops over at most T/G bands and G columns: a few integer operations per work item.
__device__ __forceinline__ void grouped_upper_tile(int index, int T, int G, int& ti, int& tj) {
  int first_row = 0;
  while (true) {
    const int height = G < T - first_row ? G : T - first_row;
    const int triangle = height * (height + 1) / 2, band = triangle + height * (T - first_row - height);
    if (index < band) {
      if (index < triangle) {
        int column = 0;
        while ((column + 1) * (column + 2) / 2 <= index) ++column;
        ti = first_row + index - column * (column + 1) / 2;
        tj = first_row + column;
      } else {
        index -= triangle;
        ti = first_row + index % height;
        tj = first_row + height + index / height;
      }
      return;
    }
    index -= band;
    first_row += height;
  }
}

}  // namespace oj

// ==== the fully fused small-matrix kernel (compiler/cuda/fused_small_codegen.cpp) ====
// One CTA runs a whole iteration for one matrix; every product of the schedule goes through
// cta_product below, so its index math is written (and reviewed) once.
namespace oj {

// A 16-bit matrix operand read by MMA fragments: ROWS x COLS, element (r, c) at
// base[r * ROW_STRIDE + c * COL_STRIDE], in global or shared memory (the generator bakes the
// strides in, so a transposed view is the same matrix with the strides swapped). PAIR_ALIGNED:
// the generator proved that (r, c) and (r, c + 1) are adjacent and 4-byte aligned for even c
// (COL_STRIDE == 1, even ROW_STRIDE, even base offset), so a fragment pair is one 32-bit load.
// Plain (coherent) loads on purpose: the values were written earlier in the same kernel, so the
// read-only path (ld.global.nc) would be wrong.
template <int ROWS, int COLS, int ROW_STRIDE, int COL_STRIDE, bool PAIR_ALIGNED>
struct FragmentSource {
  const u16* base;
  // (M[r][c], M[r][c + 1]) packed low | high << 16 for an even c; zero outside the matrix, so
  // ragged edges contribute nothing to the products (and never read out of bounds).
  template <bool GUARD_ROWS, bool GUARD_COLS>
  __device__ __forceinline__ u32 pair(int r, int c) const {
    if (GUARD_ROWS && r >= ROWS) return 0u;
    if (GUARD_COLS && c >= COLS) return 0u;
    const u16* at = base + r * ROW_STRIDE + c * COL_STRIDE;
    if (PAIR_ALIGNED && (COLS % 2 == 0 || !GUARD_COLS)) return *reinterpret_cast<const u32*>(at);
    const u32 low = at[0];
    const u32 high = (GUARD_COLS && c + 1 >= COLS) ? 0u : static_cast<u32>(at[COL_STRIDE]);
    return low | (high << 16);
  }
};

template <bool BF16>
__device__ __forceinline__ void mma_16bit(float* c, const u32* a, const u32* b) {
  if (BF16) mma_bf16(c, a, b);
  else mma_f16(c, a, b);
}

// D (M x N) = A (M x K) · B (K x N) for the whole CTA (WARPS warps). `a` reads A; `bt` reads Bᵀ
// (N x K), i.e. B through its transposed view, so both operands deliver pairs along k as the
// MMA wants. Output tiles of TILE x TILE are dealt round-robin to the warps; UPPER (symmetric
// results, M == N) visits only the T(T+1)/2 tiles with ti <= tj and hands the epilogue only
// i <= j, which stores the element and its mirror. `epilogue(i, j, acc)` gets each in-range
// element's f32 sum exactly once. No barrier inside: the caller separates phases.
template <int M, int N, int K, int TILE, int WARPS, bool UPPER, bool BF16, class SourceA, class SourceBt, class Epilogue>
__device__ __forceinline__ void cta_product(const SourceA& a, const SourceBt& bt, Epilogue epilogue) {
  static_assert(TILE % 16 == 0, "the warp tile is whole 16-row and 8-column MMAs");
  static_assert(!UPPER || M == N, "a triangular product is square");
  constexpr int FM = TILE / 16, FN = TILE / 8;
  constexpr int TILES_M = (M + TILE - 1) / TILE, TILES_N = (N + TILE - 1) / TILE;
  constexpr int TILES = UPPER ? TILES_M * (TILES_M + 1) / 2 : TILES_M * TILES_N;
  // Guards only where a dimension is ragged (compile-time: the common case has none).
  constexpr bool GUARD_M = M % TILE != 0, GUARD_N = N % TILE != 0, GUARD_K = K % 16 != 0;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  for (int tile = warp; tile < TILES; tile += WARPS) {
    int ti, tj;
    if (UPPER) {
      upper_tile(tile, ti, tj);
    } else {
      ti = tile / TILES_N;
      tj = tile % TILES_N;
    }
    const int row0 = ti * TILE, col0 = tj * TILE;
    float acc[FM][FN][4];
    zero_accumulators(acc);
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 16) {
      u32 af[FM][4], bf[FN][2];
#pragma unroll
      for (int x = 0; x < FM; ++x) {  // the fragment layout of mma_bf16 above
        const int r = row0 + x * 16 + g;
        af[x][0] = a.template pair<GUARD_M, GUARD_K>(r, k0 + 2 * t);
        af[x][1] = a.template pair<GUARD_M, GUARD_K>(r + 8, k0 + 2 * t);
        af[x][2] = a.template pair<GUARD_M, GUARD_K>(r, k0 + 2 * t + 8);
        af[x][3] = a.template pair<GUARD_M, GUARD_K>(r + 8, k0 + 2 * t + 8);
      }
#pragma unroll
      for (int y = 0; y < FN; ++y) {
        const int c = col0 + y * 8 + g;
        bf[y][0] = bt.template pair<GUARD_N, GUARD_K>(c, k0 + 2 * t);
        bf[y][1] = bt.template pair<GUARD_N, GUARD_K>(c, k0 + 2 * t + 8);
      }
#pragma unroll
      for (int x = 0; x < FM; ++x)
#pragma unroll
        for (int y = 0; y < FN; ++y) mma_16bit<BF16>(acc[x][y], af[x], bf[y]);
    }
#pragma unroll
    for (int x = 0; x < FM; ++x)
#pragma unroll
      for (int y = 0; y < FN; ++y)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int i = row0 + x * 16 + g + (q / 2) * 8, j = col0 + y * 8 + 2 * t + (q % 2);
          if ((GUARD_M && i >= M) || (GUARD_N && j >= N) || (UPPER && i > j)) continue;
          epilogue(i, j, acc[x][y][q]);
        }
  }
}

}  // namespace oj
