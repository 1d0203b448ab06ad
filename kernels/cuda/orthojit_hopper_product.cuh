// The sm_90a product tile, written once as a device template over the Hopper primitives
// (orthojit_hopper_primitives.cuh) and the layout math (orthojit_hopper_layout.cuh):
//
//   D = α·A·B + β·C + γ·I      A: M x K bf16 (row-major, K-major for WGMMA), B: K x N bf16,
//                              C, D: M x N (row strides ldc, ldd), f32 accumulation
//
// A CTA computes one 128 x 128 tile of D (tile_row, tile_col of matrix `matrix` of a batch: the
// entry kernel maps its block to them, and offsets C and D to the matrix; the tensor maps are 3-D) with 384 threads in three warpgroups, warp-specialized as the Hopper GEMMs of CUTLASS 3,
// ThunderKittens and FlashAttention-3 are:
//
//   warpgroup 0, one thread (producer): per K tile of 64, waits for the stage's `empty` barrier,
//       arms its `full` barrier with the stage's bytes and issues the TMA loads of A (128 x 64) and
//       B (64 x 128: one box of Bᵀ's rows when B is K-major, two 64-column boxes when it is
//       MN-major), which complete on `full`. Gives its registers back (setmaxnreg.dec 40).
//   warpgroups 1 and 2 (consumers, rows 0-63 and 64-127 of the tile): take registers
//       (setmaxnreg.inc 232), wait for `full`, issue four wgmma m64n128k16 (k steps of 16) straight
//       from the swizzled stage (no transposing copies: MN-major B goes through wgmma's
//       transpose bit), commit, and keep one group in flight: once the previous K tile's group
//       has completed (wgmma.wait_group 1) its stage goes back to the producer (`empty`).
//
// kStages = 4 buffers of 32 KiB (128 KiB of dynamic shared memory, above the 48 KiB default: the
// launch sets cudaFuncAttributeMaxDynamicSharedMemorySize). Barrier phases: the t-th K tile uses
// stage t mod 4 in round r = t / 4; consumers wait for `full` parity r mod 2, the producer for
// `empty` parity (r + 1) mod 2 (round 0 passes at once on fresh barriers). The epilogue reads the
// accumulators where accumulator_coordinate says they are and writes D directly (no shared
// memory; neighbouring columns in one access), rows and columns beyond M and N skipped; TMA zero-fills the loads beyond them, so
// partial tiles need no other care. A triangular product (kTriangular: D symmetric, m == n, the
// entry kernel launches the upper tiles only) stores each element (i, j), i <= j, at (i, j) and at
// (j, i): the same bits on both sides, so D is exactly symmetric.
#pragma once

#include "orthojit_device.cuh"
#include "orthojit_hopper_primitives.cuh"

namespace oj::hopper {

// Two neighbouring elements of a row as f32 (the second only when `both`), in one access when `packed`.
template <typename T>
__device__ __forceinline__ void load_pair(const typename T::storage* at, bool both, bool packed, float& first, float& second) {
  if (packed) {
    if constexpr (sizeof(typename T::storage) == 2) {
      const u32 bits = *reinterpret_cast<const u32*>(at);
      first = T::load(static_cast<typename T::storage>(bits & 0xffffu));
      second = T::load(static_cast<typename T::storage>(bits >> 16));
    } else {
      const float2 both_values = *reinterpret_cast<const float2*>(at);
      first = both_values.x;
      second = both_values.y;
    }
    return;
  }
  first = T::load(at[0]);
  if (both) second = T::load(at[1]);
}
template <typename T>
__device__ __forceinline__ void store_pair(typename T::storage* at, bool both, bool packed, float first, float second) {
  if (packed) {
    if constexpr (sizeof(typename T::storage) == 2) {
      *reinterpret_cast<u32*>(at) = static_cast<u32>(T::store(first)) | (static_cast<u32>(T::store(second)) << 16);
    } else {
      *reinterpret_cast<float2*>(at) = make_float2(first, second);
    }
    return;
  }
  at[0] = T::store(first);
  if (both) at[1] = T::store(second);
}

template <bool kBMnMajor, bool kTriangular, typename TD, typename TC>
__device__ __forceinline__ void product_tile(const TensorMap& a_map, const TensorMap& b_map, const typename TC::storage* c, typename TD::storage* d, int m,
                                             int n, int k, int ldc, int ldd, float alpha, float beta, float gamma, int tile_row, int tile_col,
                                             int matrix) {
  // The stages start on a 1024-byte boundary of the shared window (the swizzle atom; TMA's and
  // wgmma's 128-byte swizzle are functions of the address bits 4-9).
  unsigned char* const window_start = dynamic_shared_window();
  const u32 window = shared_address(window_start);
  unsigned char* const shared = window_start + (kSwizzleAtomBytes - window % kSwizzleAtomBytes) % kSwizzleAtomBytes;
  u64* const full = reinterpret_cast<u64*>(shared + kBarrierOffset);
  u64* const empty = full + kStages;
  const u32 thread = threadIdx.x, group = thread / 128;
  const int k_tiles = (k + static_cast<int>(kTileK) - 1) / static_cast<int>(kTileK);
  const int m0 = tile_row * static_cast<int>(kTileM), n0 = tile_col * static_cast<int>(kTileN);
  if (thread == 0) {
    for (u32 s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);                 // the producer's arrive (with the bytes)
      barrier_init(&empty[s], kConsumerGroups);  // one arrival per consumer warpgroup
    }
    barrier_init_fence();
  }
  __syncthreads();

  if (group == 0) {
    registers_decrease<kProducerRegisters>();
    if (thread != 0) return;
    for (int t = 0; t < k_tiles; ++t) {
      const u32 s = static_cast<u32>(t) % kStages, round = static_cast<u32>(t) / kStages;
      barrier_wait(&empty[s], (round + 1) % 2);
      barrier_arrive_expect_bytes(&full[s], kStageBytes);
      unsigned char* const stage = shared + s * kStageBytes;
      const int k0 = t * static_cast<int>(kTileK);
      tma_load_3d(stage, &a_map, k0, m0, matrix, &full[s]);
      if (kBMnMajor) {
        tma_load_3d(stage + kStageABytes, &b_map, n0, k0, matrix, &full[s]);
        tma_load_3d(stage + kStageABytes + 64 * kSwizzleBytes, &b_map, n0 + 64, k0, matrix, &full[s]);
      } else {
        tma_load_3d(stage + kStageABytes, &b_map, k0, n0, matrix, &full[s]);
      }
    }
    return;
  }

  registers_increase<kConsumerRegisters>();
  const u32 consumer = group - 1;
  float accumulator[64];
  for (int r = 0; r < 64; ++r) accumulator[r] = 0.0f;
  for (int t = 0; t < k_tiles; ++t) {
    const u32 s = static_cast<u32>(t) % kStages, round = static_cast<u32>(t) / kStages;
    barrier_wait(&full[s], round % 2);
    const u32 a = shared_address(shared + s * kStageBytes), b = a + kStageABytes;
    wgmma_fence();
#pragma unroll
    for (u32 j = 0; j < kTileK / 16; ++j)
      wgmma_m64n128k16_bf16<kBMnMajor>(accumulator, a_descriptor(a, consumer, j), kBMnMajor ? b_descriptor_mn_major(b, j) : b_descriptor_k_major(b, j),
                                       (t > 0 || j > 0) ? 1 : 0);
    wgmma_commit();
    // The previous K tile's products have completed once at most this tile's group is running:
    // its stage may be overwritten.
    wgmma_wait<1>();
    if (t > 0 && thread % 128 == 0) barrier_arrive(&empty[(static_cast<u32>(t) - 1) % kStages]);
  }
  wgmma_wait<0>();

  // Registers 2q and 2q + 1 are neighbouring columns of one row: one 4-byte (bf16) or 8-byte (f32)
  // access for both where the pair is inside the matrix and the row stride keeps it aligned
  // (columns are even, allocations at least 256-byte aligned).
  const u32 local = thread % 128;
  const bool c_pairs = ldc % 2 == 0, d_pairs = ldd % 2 == 0;
#pragma unroll
  for (u32 r = 0; r < 64; r += 2) {
    const Coordinate at = accumulator_coordinate(local, r);
    const int row = m0 + static_cast<int>(consumer * 64 + at.row), col = n0 + static_cast<int>(at.col);
    if (row >= m || col >= n) continue;
    if (kTriangular) {
      // Only i <= j is this tile's; each value goes to both places (2-byte or 4-byte stores: the
      // mirrored ones run down a column).
#pragma unroll
      for (u32 h = 0; h < 2; ++h) {
        const int j = col + static_cast<int>(h);
        if (j >= n || row > j) continue;
        float value = alpha * accumulator[r + h];
        if (c) value += beta * TC::load(c[static_cast<long long>(row) * ldc + j]);
        if (row == j) value += gamma;
        const typename TD::storage stored = TD::store(value);
        d[static_cast<long long>(row) * ldd + j] = stored;
        if (row != j) d[static_cast<long long>(j) * ldd + row] = stored;
      }
      continue;
    }
    const bool pair = col + 1 < n;
    float value0 = alpha * accumulator[r], value1 = alpha * accumulator[r + 1];
    if (c) {
      const typename TC::storage* c_at = c + static_cast<long long>(row) * ldc + col;
      float c0, c1 = 0.0f;
      load_pair<TC>(c_at, pair, pair && c_pairs, c0, c1);
      value0 += beta * c0;
      value1 += beta * c1;
    }
    if (row == col) value0 += gamma;
    if (row == col + 1) value1 += gamma;
    store_pair<TD>(d + static_cast<long long>(row) * ldd + col, pair, pair && d_pairs, value0, value1);
  }
}

}  // namespace oj::hopper
