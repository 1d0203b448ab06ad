// The per-op product kernel of the pre-Hopper path (sm_80, and sm_90 without the `a` target):
// D = α·A·B + β·C + γ·I on mma.sync.m16n8k16, written once here as a device template over the
// primitives (orthojit_device_primitives.cuh). compiler/cuda/cuda_codegen.cpp instantiates it per
// product with a generated description P (below): the shape, the tile, the operands' strides and
// the shared-memory index formulas, which come from compiler/cuda/shared_layout.h, the same
// formulas tests/cuda_bank_conflict_test.cpp checks for bank conflicts. The host emulation runs
// this file as it is.
//
// Structure (one CTA per output tile, or persistent over the upper tiles of a symmetric product):
//   * main loop over k-tiles of BK: either a cp.async pipeline of STAGES k-tiles in flight (16-byte
//     chunks from global straight into shared memory, one barrier per k-tile), or, where 16-byte
//     chunks are impossible, registers staging one k-tile ahead (two barriers per k-tile);
//   * per k-tile, BK/16 steps: A fragments by 32-bit loads (k-contiguous A) or ldmatrix.x4.trans
//     (m-contiguous A), B fragments by 32-bit loads (k-contiguous B) or ldmatrix.x{2,4}.trans
//     (n-contiguous B: no transposing stores), then FM x FN MMAs per warp;
//   * epilogue α·acc + β·C + γ·I rounded once to D's type: scalar (one element per access), or
//     vector (quad_transpose gives a lane 8 consecutive columns: 16-byte C loads and D stores),
//     where a triangular product sends its mirrored tile through shared memory so that the lower
//     triangle is written in 16-byte rows too.
//
// P, generated per product (cuda_codegen.cpp, emit_mma_product), provides:
//   int constants   M N K (the product), BM BN BK (the tile), WM WN WARPS_N THREADS, VA VB (chunk
//                   widths of A and B along their contiguous dimension: 8, 2 or 1 halves), STAGES,
//                   AS_ROWS AS_PITCH BS_ROWS BS_PITCH (the shared tiles, shared_layout.h);
//                   for TRIANGULAR: TILES_T GROUP UPPER WORK (the persistent schedule)
//   bool constants  BF16, A_K_CONTIGUOUS, B_K_CONTIGUOUS, PIPELINED, B_LDMATRIX_X4, TRIANGULAR,
//                   HAS_C, HAS_GAMMA, VECTOR_D, VECTOR_C, SHARED_MIRROR, FUSED_UPDATE
//   Index           int, or long long where a per-matrix offset needs 64 bits
//   Index strides   A_ROW_STRIDE A_COL_STRIDE (A is M x K), B_ROW_STRIDE B_COL_STRIDE (B is K x N),
//                   C_ROW_STRIDE C_COL_STRIDE, D_ROW_STRIDE D_COL_STRIDE
//   long long       A_MATRIX B_MATRIX C_MATRIX OUT_MATRIX: per-matrix offsets of the batch (OUT:
//                   D's, or the Muon step's argument words when FUSED_UPDATE)
//   float           ALPHA BETA GAMMA;  types CTag, DTag (oj::Bf16, oj::F16, oj::F32)
//   functions       position(tid) -> Position; a_store(p, s), b_store(p, s) -> At (the chunk a
//                   thread moves, in the shared tile); a_read(p, kk, x, q), b_read(p, kk, y, q)
//                   -> At (a fragment's 32-bit pair, or its ldmatrix row address: q unused);
//                   mirror_store(p, x, y, w) -> At; mirror_read(p, s) -> MirrorAt;
//                   update(io, i, j, v) when FUSED_UPDATE (the Muon step's parameter update)
#pragma once

#include "orthojit_device.cuh"

namespace oj::mma {

// Where a thread sits: its warp and lane, the lane's (g, t) of the MMA fragments, and the warp
// tile's origin in the CTA tile.
struct Position {
  int tid, warp, lane, g, t, wrow, wcol;
};
// An element of a shared tile.
struct At {
  int row, col;
};
// A 16-byte chunk of the mirror tile: logical row mr and column mc, stored at (row, col).
struct MirrorAt {
  int mr, mc, row, col;
};

// What a thread carries between global and shared memory: a chunk of V 16-bit values.
template <int V>
struct Chunk;
template <>
struct Chunk<8> {
  typedef uint4 type;
  static __device__ __forceinline__ uint4 zero() { return make_uint4(0u, 0u, 0u, 0u); }
};
template <>
struct Chunk<2> {
  typedef u32 type;
  static __device__ __forceinline__ u32 zero() { return 0u; }
};
template <>
struct Chunk<1> {
  typedef u16 type;
  static __device__ __forceinline__ u16 zero() { return static_cast<u16>(0); }
};

template <class P>
struct Tiles {
  typedef u16 AStage[P::AS_ROWS][P::AS_PITCH];
  typedef u16 BStage[P::BS_ROWS][P::BS_PITCH];
  static constexpr int A_ELEMENTS = P::AS_ROWS * P::AS_PITCH, B_ELEMENTS = P::BS_ROWS * P::BS_PITCH;
  static constexpr int FM = P::WM / 16, FN = P::WN / 8;
  static constexpr int A_CHUNKS = P::BM * P::BK / P::VA / P::THREADS, B_CHUNKS = P::BN * P::BK / P::VB / P::THREADS;
  static_assert(P::BM * P::BK / P::VA % P::THREADS == 0 && P::BN * P::BK / P::VB % P::THREADS == 0, "the tile's chunks divide evenly among its threads");
  static_assert(P::BK % 16 == 0 && P::WM % 16 == 0 && P::WN % 8 == 0, "whole MMAs");
};

// Where chunk (row, col) of a stored tile lies in the operand: a k-contiguous operand's rows run
// along m (A) or n (B), its columns along k; otherwise the other way round. `origin` is the tile's
// first row (A) or column (B), k0 its first k.
template <bool K_CONTIGUOUS>
__device__ __forceinline__ void chunk_origin(const At& at, int origin, int k0, int& gr, int& gk) {
  gr = origin + (K_CONTIGUOUS ? at.row : at.col);
  gk = k0 + (K_CONTIGUOUS ? at.col : at.row);
}

// One k-tile's cp.async copies into stage `tile` % STAGES. Outside the matrix a valid address and a
// source size of 0: cp.async zero-fills, so tile edges need no branch around the copy.
template <class P>
__device__ __forceinline__ void issue_tile(u16* stages, const u16* __restrict__ a, const u16* __restrict__ b, const Position& p, int row0, int col0, int tile) {
  typedef Tiles<P> T;
  const int stage = tile % P::STAGES, k0 = tile * P::BK;
  auto& As = reinterpret_cast<typename T::AStage*>(stages)[stage];
  auto& Bs = reinterpret_cast<typename T::BStage*>(stages + P::STAGES * T::A_ELEMENTS)[stage];
#pragma unroll
  for (int s = 0; s < T::A_CHUNKS; ++s) {
    const At at = P::a_store(p, s);
    int gr, gk;
    chunk_origin<P::A_K_CONTIGUOUS>(at, row0, k0, gr, gk);
    const bool inside = gr < P::M && gk < P::K;
    cp_async_16(&As[at.row][at.col], &a[inside ? gr * P::A_ROW_STRIDE + gk * P::A_COL_STRIDE : 0], inside);
  }
#pragma unroll
  for (int s = 0; s < T::B_CHUNKS; ++s) {
    const At at = P::b_store(p, s);
    int gc, gk;
    chunk_origin<P::B_K_CONTIGUOUS>(at, col0, k0, gc, gk);
    const bool inside = gc < P::N && gk < P::K;
    cp_async_16(&Bs[at.row][at.col], &b[inside ? gk * P::B_ROW_STRIDE + gc * P::B_COL_STRIDE : 0], inside);
  }
}

// The register-staged path: this thread's chunks of the k-tile at k0, zero outside the matrix (a
// chunk is wholly inside or outside: the generator chose V so).
template <class P>
__device__ __forceinline__ void load_chunks(const u16* __restrict__ a, const u16* __restrict__ b, const Position& p, int row0, int col0, int k0,
                                            typename Chunk<P::VA>::type* ra, typename Chunk<P::VB>::type* rb) {
  typedef Tiles<P> T;
#pragma unroll
  for (int s = 0; s < T::A_CHUNKS; ++s) {
    int gr, gk;
    chunk_origin<P::A_K_CONTIGUOUS>(P::a_store(p, s), row0, k0, gr, gk);
    ra[s] = (gr < P::M && gk < P::K) ? *reinterpret_cast<const typename Chunk<P::VA>::type*>(&a[gr * P::A_ROW_STRIDE + gk * P::A_COL_STRIDE])
                                     : Chunk<P::VA>::zero();
  }
#pragma unroll
  for (int s = 0; s < T::B_CHUNKS; ++s) {
    int gc, gk;
    chunk_origin<P::B_K_CONTIGUOUS>(P::b_store(p, s), col0, k0, gc, gk);
    rb[s] = (gc < P::N && gk < P::K) ? *reinterpret_cast<const typename Chunk<P::VB>::type*>(&b[gk * P::B_ROW_STRIDE + gc * P::B_COL_STRIDE])
                                     : Chunk<P::VB>::zero();
  }
}

template <class P>
__device__ __forceinline__ void store_chunks(typename Tiles<P>::AStage& As, typename Tiles<P>::BStage& Bs, const Position& p,
                                             const typename Chunk<P::VA>::type* ra, const typename Chunk<P::VB>::type* rb) {
  typedef Tiles<P> T;
#pragma unroll
  for (int s = 0; s < T::A_CHUNKS; ++s) {
    const At at = P::a_store(p, s);
    *reinterpret_cast<typename Chunk<P::VA>::type*>(&As[at.row][at.col]) = ra[s];
  }
#pragma unroll
  for (int s = 0; s < T::B_CHUNKS; ++s) {
    const At at = P::b_store(p, s);
    *reinterpret_cast<typename Chunk<P::VB>::type*>(&Bs[at.row][at.col]) = rb[s];
  }
}

// The MMAs of one k-tile held in As, Bs: BK/16 steps of fragment loads (the m16n8k16 layouts of
// orthojit_device_primitives.cuh) and FM x FN MMAs.
template <class P>
__device__ __forceinline__ void multiply_tile(const typename Tiles<P>::AStage& As, const typename Tiles<P>::BStage& Bs, const Position& p,
                                              float (&acc)[Tiles<P>::FM][Tiles<P>::FN][4]) {
  constexpr int FM = Tiles<P>::FM, FN = Tiles<P>::FN;
#pragma unroll
  for (int kk = 0; kk < P::BK; kk += 16) {
    u32 af[FM][4], bf[FN][2];
#pragma unroll
    for (int x = 0; x < FM; ++x) {
      if (P::A_K_CONTIGUOUS) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const At at = P::a_read(p, kk, x, q);
          af[x][q] = *reinterpret_cast<const u32*>(&As[at.row][at.col]);
        }
      } else {
        const At at = P::a_read(p, kk, x, 0);
        ldmatrix_x4_trans(af[x], &As[at.row][at.col]);
      }
    }
    if (P::B_K_CONTIGUOUS) {
#pragma unroll
      for (int y = 0; y < FN; ++y)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const At at = P::b_read(p, kk, y, q);
          bf[y][q] = *reinterpret_cast<const u32*>(&Bs[at.row][at.col]);
        }
    } else if (P::B_LDMATRIX_X4) {
#pragma unroll
      for (int y = 0; y < FN; y += 2) {
        const At at = P::b_read(p, kk, y, 0);
        ldmatrix_x4_trans(&bf[y][0], &Bs[at.row][at.col]);
      }
    } else {
#pragma unroll
      for (int y = 0; y < FN; ++y) {
        const At at = P::b_read(p, kk, y, 0);
        ldmatrix_x2_trans(bf[y], &Bs[at.row][at.col]);
      }
    }
#pragma unroll
    for (int x = 0; x < FM; ++x)
#pragma unroll
      for (int y = 0; y < FN; ++y) {
        if (P::BF16) mma_bf16(acc[x][y], af[x], bf[y]);
        else mma_f16(acc[x][y], af[x], bf[y]);
      }
  }
}

// One pipelined k-tile: wait for its copies, publish it, refill the stage freed by the previous
// k-tile, multiply.
template <class P>
__device__ __forceinline__ void pipelined_step(u16* stages, const u16* __restrict__ a, const u16* __restrict__ b, const Position& p, int row0, int col0,
                                               int tile, float (&acc)[Tiles<P>::FM][Tiles<P>::FN][4]) {
  typedef Tiles<P> T;
  constexpr int TILES = (P::K + P::BK - 1) / P::BK;
  cp_async_wait<P::STAGES - 2>();  // this thread's copies of `tile` landed
  __syncthreads();                 // everyone's did, and everyone finished computing tile - 1, whose stage is refilled next
  if (tile + P::STAGES - 1 < TILES) issue_tile<P>(stages, a, b, p, row0, col0, tile + P::STAGES - 1);
  cp_async_commit();  // an empty group at the end keeps the count
  multiply_tile<P>(reinterpret_cast<const typename T::AStage*>(stages)[tile % P::STAGES],
                   reinterpret_cast<const typename T::BStage*>(stages + P::STAGES * T::A_ELEMENTS)[tile % P::STAGES], p, acc);
}

// The value of element (i, j) before rounding: α·acc + β·C + γ·[i == j], in this order, each
// operation rounded on its own (f32_mul/f32_add: no FMA contraction), so the device gives the host
// emulation's bits (the CPU backend's and the interpreter's rounding points are the product's sum
// and the stored result).
template <class P>
__device__ __forceinline__ float epilogue_value(float acc, float c, int i, int j) {
  float v = f32_mul(P::ALPHA, acc);
  if (P::HAS_C) v = f32_add(v, f32_mul(P::BETA, c));
  if (P::HAS_GAMMA && i == j) v = f32_add(v, P::GAMMA);
  return v;
}

// One element per access. A triangular product visits only i <= j and stores the element and its
// mirror (diagonal tiles too), so D is exactly symmetric.
template <class P, class CPointer, class OutPointer>
__device__ __forceinline__ void scalar_epilogue(const float (&acc)[Tiles<P>::FM][Tiles<P>::FN][4], const Position& p, int row0, int col0, CPointer c,
                                                OutPointer out) {
  constexpr int FM = Tiles<P>::FM, FN = Tiles<P>::FN;
#pragma unroll
  for (int x = 0; x < FM; ++x)
#pragma unroll
    for (int y = 0; y < FN; ++y)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = row0 + p.wrow + x * 16 + p.g + (q / 2) * 8, j = col0 + p.wcol + y * 8 + 2 * p.t + (q % 2);
        if (i >= P::M || j >= P::N || (P::TRIANGULAR && i > j)) continue;
        float cv = 0.0f;
        if constexpr (P::HAS_C) cv = P::CTag::load(c[i * P::C_ROW_STRIDE + j * P::C_COL_STRIDE]);
        const float v = epilogue_value<P>(acc[x][y][q], cv, i, j);
        if constexpr (P::FUSED_UPDATE) {
          P::update(out, i, j, v);
        } else {
          const auto stored = P::DTag::store(v);
          out[i * P::D_ROW_STRIDE + j * P::D_COL_STRIDE] = stored;
          if (P::TRIANGULAR && i != j) out[j * P::D_ROW_STRIDE + i * P::D_COL_STRIDE] = stored;
        }
      }
}

// 16-byte accesses: the accumulator gives lane (g, t) columns 2t, 2t + 1 of rows g and g + 8 of
// each 8-column fragment; quad_transpose swaps the quad's pairs of two fragments (slot s: fragment
// y + s/2, row half s%2) so that lane t holds all 8 columns of one row chunk (fragment y + t/2,
// row g + 8·(t%2)): one 16-byte C load and one 16-byte D store instead of eight 2-byte ones. The
// per-element arithmetic is the scalar epilogue's, so D's bits are the same. With SHARED_MIRROR
// (a triangular product) the upper triangle is stored directly and the tile's transpose goes
// through the stage memory (the swizzled mirror tile of shared_layout.h) to the lower triangle,
// read back by rows: coalesced 16-byte stores instead of one 2-byte store per element down a
// column.
template <class P, class CPointer>
__device__ __forceinline__ void vector_epilogue(const float (&acc)[Tiles<P>::FM][Tiles<P>::FN][4], const Position& p, int ti, int tj, CPointer c,
                                                u16* __restrict__ d, u16* stages) {
  constexpr int FM = Tiles<P>::FM, FN = Tiles<P>::FN;
  const int row0 = ti * P::BM, col0 = tj * P::BN;
  typedef u16 MirrorTile[P::BN][P::BM];
  if (P::SHARED_MIRROR) __syncthreads();  // every warp has read its last stage: the stage memory holds the mirror tile now
  MirrorTile& Ms = *reinterpret_cast<MirrorTile*>(stages);
#pragma unroll
  for (int x = 0; x < FM; ++x)
#pragma unroll
    for (int y = 0; y < FN; y += 2) {
      u32 lo[4], hi[4];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        lo[s] = __float_as_uint(acc[x][y + s / 2][(s % 2) * 2]);
        hi[s] = __float_as_uint(acc[x][y + s / 2][(s % 2) * 2 + 1]);
      }
      quad_transpose(lo);  // every lane of the warp takes part
      quad_transpose(hi);
      const int i = row0 + p.wrow + x * 16 + p.g + (p.t % 2) * 8, j0 = col0 + p.wcol + (y + p.t / 2) * 8;
      u32 dw[4] = {0u, 0u, 0u, 0u};
      if (i < P::M && j0 < P::N) {  // N % 8 == 0: a chunk is wholly inside or outside
        u32 cw[4] = {0u, 0u, 0u, 0u};
        if constexpr (P::HAS_C && P::VECTOR_C) {
          const uint4 cv = *reinterpret_cast<const uint4*>(&c[i * P::C_ROW_STRIDE + j0]);
          cw[0] = cv.x, cw[1] = cv.y, cw[2] = cv.z, cw[3] = cv.w;
        }
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          u32 packed = 0;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int j = j0 + 2 * w + h;
            float cv = 0.0f;
            if constexpr (P::HAS_C && P::VECTOR_C) cv = P::CTag::load(static_cast<u16>(h ? cw[w] >> 16 : cw[w] & 0xffffu));
            else if constexpr (P::HAS_C) cv = P::CTag::load(c[i * P::C_ROW_STRIDE + j * P::C_COL_STRIDE]);
            const float v = epilogue_value<P>(__uint_as_float(h ? hi[w] : lo[w]), cv, i, j);
            packed |= static_cast<u32>(P::DTag::store(v)) << (16 * h);
          }
          dw[w] = packed;
        }
        if (!P::SHARED_MIRROR || ti != tj || j0 >= i) {
          // Off the diagonal tile, or a chunk wholly at or above the diagonal.
          *reinterpret_cast<uint4*>(&d[i * P::D_ROW_STRIDE + j0]) = make_uint4(dw[0], dw[1], dw[2], dw[3]);
        } else if (j0 + 7 >= i) {
          // A chunk crossing the diagonal: its upper elements (the lower half is the mirror's).
#pragma unroll
          for (int w = 0; w < 8; ++w)
            if (j0 + w >= i) d[i * P::D_ROW_STRIDE + j0 + w] = static_cast<u16>(dw[w / 2] >> (16 * (w % 2)));
        }
      }
      if constexpr (P::SHARED_MIRROR) {
        // Ms[jl][il] = D[row0 + il][col0 + jl] (zero outside the matrix: those are never read back).
#pragma unroll
        for (int w = 0; w < 8; ++w) {
          const At at = P::mirror_store(p, x, y, w);
          Ms[at.row][at.col] = static_cast<u16>(dw[w / 2] >> (16 * (w % 2)));
        }
      }
    }
  if constexpr (P::SHARED_MIRROR) {
    __syncthreads();  // the mirror tile is complete
    // The lower triangle: row col0 + mr of D takes columns row0 + mc .. + 7 from Ms's row mr. Not
    // unrolled: fully unrolled, ptxas kept every chunk's addresses live at once (210 registers
    // wanted, capped at 168 with 4 bytes spilled on a 48x48x80 X·Xᵀ for sm_80); rolled, 137.
#pragma unroll 1
    for (int s = 0; s < P::BN * P::BM / 8 / P::THREADS; ++s) {
      const MirrorAt at = P::mirror_read(p, s);
      const int jr = col0 + at.mr, ic = row0 + at.mc;
      if (jr >= P::N || ic >= P::M) continue;
      const uint4 chunk = *reinterpret_cast<const uint4*>(&Ms[at.row][at.col]);
      if (ti != tj || ic + 7 < jr) {
        *reinterpret_cast<uint4*>(&d[jr * P::D_ROW_STRIDE + ic]) = chunk;
      } else {
        const u32 words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
        for (int h = 0; h < 8; ++h)
          if (ic + h < jr) d[jr * P::D_ROW_STRIDE + ic + h] = static_cast<u16>(words[h / 2] >> (16 * (h % 2)));
      }
    }
  }
}

// Output tile (ti, tj) of matrix z: main loop, then the epilogue.
template <class P, class CPointer, class OutPointer>
__device__ __forceinline__ void product_tile(u16* stages, const u16* __restrict__ a_all, const u16* __restrict__ b_all, CPointer c_all, OutPointer out_all,
                                             const Position& p, long long z, int ti, int tj) {
  typedef Tiles<P> T;
  constexpr int FM = T::FM, FN = T::FN;
  const u16* __restrict__ a = a_all + z * P::A_MATRIX;
  const u16* __restrict__ b = b_all + z * P::B_MATRIX;
  const CPointer c = P::HAS_C ? c_all + z * P::C_MATRIX : c_all;
  const OutPointer out = out_all + z * P::OUT_MATRIX;
  const int row0 = ti * P::BM, col0 = tj * P::BN;
  float acc[FM][FN][4];
  zero_accumulators(acc);
  if constexpr (P::PIPELINED) {
    constexpr int TILES = (P::K + P::BK - 1) / P::BK;
    // k-tile t goes into stage t % STAGES.
#pragma unroll
    for (int pre = 0; pre < P::STAGES - 1; ++pre) {
      if (pre < TILES) issue_tile<P>(stages, a, b, p, row0, col0, pre);
      cp_async_commit();
    }
    // Unrolled by two: ptxas (NVRTC 13, sm_90) spilled a register or two here both with its own
    // partial unrolling and with none, in some of the shipped shapes; by two it spilled in none
    // (tests/cuda_codegen_test.cpp checks every generated kernel). Inside the persistent loop of
    // a triangular product, by two spilled 8-12 bytes (168 registers) on the 40x40x136 X·Xᵀ of a
    // gram schedule, not unrolled none.
    if constexpr (P::TRIANGULAR) {
#pragma unroll 1
      for (int tile = 0; tile < TILES; ++tile) pipelined_step<P>(stages, a, b, p, row0, col0, tile, acc);
    } else {
#pragma unroll 2
      for (int tile = 0; tile < TILES; ++tile) pipelined_step<P>(stages, a, b, p, row0, col0, tile, acc);
    }
  } else {
    auto& As = *reinterpret_cast<typename T::AStage*>(stages);
    auto& Bs = *reinterpret_cast<typename T::BStage*>(stages + T::A_ELEMENTS);
    typename Chunk<P::VA>::type ra[T::A_CHUNKS];
    typename Chunk<P::VB>::type rb[T::B_CHUNKS];
    load_chunks<P>(a, b, p, row0, col0, 0, ra, rb);
    for (int k0 = 0; k0 < P::K; k0 += P::BK) {
      __syncthreads();  // everyone is done reading the previous tile
      store_chunks<P>(As, Bs, p, ra, rb);
      __syncthreads();
      if (k0 + P::BK < P::K) load_chunks<P>(a, b, p, row0, col0, k0 + P::BK, ra, rb);  // the next tile's loads overlap this tile's MMAs
      multiply_tile<P>(As, Bs, p, acc);
    }
  }
  if constexpr (P::VECTOR_D) vector_epilogue<P>(acc, p, ti, tj, c, out, stages);
  else scalar_epilogue<P>(acc, p, row0, col0, c, out);
}

// The whole kernel: a grid of (tiles_n, tiles_m, batch) CTAs, or, for a triangular product, a
// persistent grid taking work items (matrix, upper tile) in the grouped order of
// grouped_upper_tile. One block of shared memory holds the stages (and, after the main loop, the
// mirror tile).
template <class P, class CPointer, class OutPointer>
__device__ __forceinline__ void product(const u16* __restrict__ a_all, const u16* __restrict__ b_all, CPointer c_all, OutPointer out_all) {
  typedef Tiles<P> T;
  OJ_TEMPLATE_SHARED(__align__(128) u16, stages, P::STAGES * (T::A_ELEMENTS + T::B_ELEMENTS));
  const Position p = P::position(static_cast<int>(threadIdx.x));
  if constexpr (P::TRIANGULAR) {
    for (int work = blockIdx.x; work < P::WORK; work += gridDim.x) {
      const long long z = work / P::UPPER;
      int ti, tj;
      grouped_upper_tile(work % P::UPPER, P::TILES_T, P::GROUP, ti, tj);
      product_tile<P>(stages, a_all, b_all, c_all, out_all, p, z, ti, tj);
      __syncthreads();  // the next work item's loads reuse the shared memory
    }
  } else {
    product_tile<P>(stages, a_all, b_all, c_all, out_all, p, static_cast<long long>(blockIdx.z), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x));
  }
}

}  // namespace oj::mma
