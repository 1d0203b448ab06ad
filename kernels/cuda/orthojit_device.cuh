// orthojit's device vocabulary: everything generated CUDA code uses besides plain C++. It is
// embedded in the binary and handed to NVRTC as a named header, so compiling a kernel needs no
// CUDA toolkit headers on the user's machine (no cuda_bf16.h, no mma.h): storage conversions and
// the tensor-core instruction are written as inline PTX here, in one place.
//
// Conventions: 16-bit storage is carried as raw bits (unsigned short); arithmetic is f32.
#pragma once

namespace oj {

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// ---- storage conversions (round to nearest even, as the reference interpreter) ----
__device__ __forceinline__ float bf16_to_f32(u16 bits) { return __uint_as_float(static_cast<u32>(bits) << 16); }
__device__ __forceinline__ u16 f32_to_bf16(float value) {
  u16 bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));  // sm_80+
  return bits;
}
__device__ __forceinline__ float f16_to_f32(u16 bits) {
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}
__device__ __forceinline__ u16 f32_to_f16(float value) {
  u16 bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bits;
}

// ---- float64 arithmetic for the optimizer's element-wise kernels (elementwise_codegen.h) ----
// The _rn intrinsics are never contracted into FMAs, so the kernels round exactly where the C++
// update rules (runtime/muon/update_rules.cpp) round: same expression, same bits.
__device__ __forceinline__ double f64_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double f64_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double f64_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double f64_div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double f64_sqrt(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ float f64_to_f32(double value) { return __double2float_rn(value); }
// A double passed as its 64 bits (the Muon step's argument block, ir/muon_step.h).
// f32 add and divide with IEEE rounding whatever the compile flags (the ZeRO step's
// accumulation and average must give the host's bits).
__device__ __forceinline__ float f32_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float f32_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double f64_from_bits(u64 bits) { return __longlong_as_double(static_cast<long long>(bits)); }
// f64 to a 16-bit type with one rounding: to f32 rounding to odd (toward zero, then the last bit
// set when inexact), then to nearest even; correct because f32 carries more than two bits beyond
// bf16's 8 and f16's 11 (rounding to odd first never double-rounds).
__device__ __forceinline__ float f64_to_f32_odd(double value) {
  float f = __double2float_rz(value);
  if (static_cast<double>(f) != value && value == value) f = __uint_as_float(__float_as_uint(f) | 1u);
  return f;
}
__device__ __forceinline__ u16 f64_to_bf16(double value) { return f32_to_bf16(f64_to_f32_odd(value)); }
__device__ __forceinline__ u16 f64_to_f16(double value) { return f32_to_f16(f64_to_f32_odd(value)); }

// Storage types by tag: load as f32, store from f32.
struct Bf16 {
  typedef u16 storage;
  static __device__ __forceinline__ float load(u16 bits) { return bf16_to_f32(bits); }
  static __device__ __forceinline__ u16 store(float value) { return f32_to_bf16(value); }
};
struct F16 {
  typedef u16 storage;
  static __device__ __forceinline__ float load(u16 bits) { return f16_to_f32(bits); }
  static __device__ __forceinline__ u16 store(float value) { return f32_to_f16(value); }
};
struct F32 {
  typedef float storage;
  static __device__ __forceinline__ float load(float value) { return value; }
  static __device__ __forceinline__ float store(float value) { return value; }
};

// ---- the tensor-core product: D(16x8, f32) += A(16x16) · B(16x8), 16-bit operands ----
// Fragments per lane (g = lane / 4, t = lane % 4), each u32 a pair of consecutive-k values:
//   a[0] = A[g][2t..2t+1]   a[1] = A[g+8][2t..2t+1]   a[2] = A[g][2t+8..]   a[3] = A[g+8][2t+8..]
//   b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..2t+9][g]
//   c[0] = D[g][2t]  c[1] = D[g][2t+1]  c[2] = D[g+8][2t]  c[3] = D[g+8][2t+1]
__device__ __forceinline__ void mma_bf16(float* c, const u32* a, const u32* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_f16(float* c, const u32* a, const u32* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- ldmatrix: 8x8 b16 matrices from shared memory, a warp collective (PTX ISA, "ldmatrix") ----
// .x2.trans: lanes 0-15 give the 16-byte-aligned address of one row of 8 values each (lanes 0-7
// the rows of matrix 0, 8-15 those of matrix 1); lane (g = lane / 4, t = lane % 4) receives
// r[j] = M_j[2t][g] | M_j[2t + 1][g] << 16: with k rows and n columns stored, exactly the m16n8k16
// B fragment (b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]) of an n-contiguous B, without the
// transposing stores into shared memory that such a B would otherwise need.
// (volatile: it reads shared memory the compiler does not see, so it must stay after the barrier
// that publishes the tile.)
__device__ __forceinline__ void ldmatrix_x2_trans(u32* r, const u16* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
}
// .x4.trans: four matrices, lanes 8j..8j+7 giving the rows of matrix j; r[j] as above. Two B
// fragments (two 8-column groups) in one instruction.
__device__ __forceinline__ void ldmatrix_x4_trans(u32* r, const u16* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// ---- cp.async: global -> shared without registers (sm_80+; PTX ISA, "cp.async") ----
// One 16-byte chunk; `valid` false copies nothing and zero-fills (the source size operand 0), so
// tile edges need no branch around the copy. .cg: cached in L2 only (operands are streamed).
__device__ __forceinline__ void cp_async_16(void* shared_destination, const void* global_source, bool valid) {
  const unsigned destination = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(destination), "l"(global_source), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// ---- shfl.sync.bfly: the value of lane (this lane ^ mask) of the warp, every lane taking part ----
__device__ __forceinline__ u32 shfl_xor(u32 value, int mask) { return __shfl_xor_sync(0xffffffffu, value, mask); }

// ---- triangular tile scheduling: linear index -> (ti, tj) with ti <= tj ----
// Tiles are enumerated column by column of the upper triangle: index = tj(tj+1)/2 + ti.
__device__ __forceinline__ void upper_tile(int index, int& ti, int& tj) {
  int column = static_cast<int>((sqrtf(8.0f * static_cast<float>(index) + 1.0f) - 1.0f) * 0.5f);
  while (column * (column + 1) / 2 > index) --column;  // float rounding, either way
  while ((column + 1) * (column + 2) / 2 <= index) ++column;
  tj = column;
  ti = index - column * (column + 1) / 2;
}

// ---- block-wide f32/f64 sum in a fixed order (deterministic for a given block size) ----
template <typename T, int THREADS>
__device__ __forceinline__ T block_sum(T value, T* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
#pragma unroll
  for (int width = THREADS / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) scratch[threadIdx.x] += scratch[threadIdx.x + width];
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();
  return total;
}

// ---- block-wide max (any order gives the same value) ----
template <typename T, int THREADS>
__device__ __forceinline__ T block_max(T value, T* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
#pragma unroll
  for (int width = THREADS / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) scratch[threadIdx.x] = fmax(scratch[threadIdx.x], scratch[threadIdx.x + width]);
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();
  return total;
}

// The norm's power-of-two scale 2^-e, e the exponent of the largest |x| kept in [-126, 126]; 1 for
// a zero or non-finite maximum (compiler/ir/norm_scale.h, the same function on the host).
__device__ __forceinline__ float norm_scale(double largest) {
  if (!(largest > 0) || isinf(largest)) return 1.0f;
  int exponent = 0;
  frexp(largest, &exponent);
  exponent = exponent < -126 ? -126 : exponent > 126 ? 126 : exponent;
  return ldexpf(1.0f, -exponent);
}

}  // namespace oj

// ==== composed from the primitives above: the host emulation runs this part as it is ====
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
#pragma unroll
    for (int x = 0; x < FM; ++x)
#pragma unroll
      for (int y = 0; y < FN; ++y)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[x][y][q] = 0.0f;
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
