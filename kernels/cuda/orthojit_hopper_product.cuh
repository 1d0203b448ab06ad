// The sm_90a product tile, written once as a device template over the Hopper primitives
// (orthojit_hopper_primitives.cuh) and the layout math (orthojit_hopper_layout.cuh):
//
//   D = α·A·B + β·C + γ·I      A: M x K bf16 (row-major, K-major for WGMMA), B: K x N bf16,
//                              C (bf16), D (bf16 or f32): M x N, f32 accumulation
//
// A persistent kernel: about one CTA per SM, each taking work items blockIdx.x, blockIdx.x +
// gridDim.x, ... (a 128 x kN tile of D of one matrix of a batch, kN 128, or 256 for dense
// products with a bf16 D (wgmma m64n256k16, 128 accumulators per consumer thread, 3 stages of
// 48 KiB beside the 64 KiB epilogue tile): items are batch-major; within
// a matrix the tiles go in the grouped order of grouped_tile, or for a triangular product the
// upper tiles in the bands of grouped_upper_tile), with 384 threads in three warpgroups,
// warp-specialized as the Hopper GEMMs of CUTLASS 3, ThunderKittens and FlashAttention-3 are:
//
//   warpgroup 0, one thread (producer): for every item and K tile of 64, waits for the stage's
//       `empty` barrier, arms its `full` barrier with the stage's bytes and issues the TMA loads of
//       A (128 x 64) and B (64 x kN: one box of Bᵀ's rows when B is K-major, kN/64 64-column
//       boxes when it is MN-major), which complete on `full`. It runs ahead into the next item while the
//       consumers finish one: the epilogue overlaps the next tile's loads. Gives its registers back
//       (setmaxnreg.dec 40).
//   warpgroups 1 and 2 (consumers, rows 0-63 and 64-127 of the tile): take registers
//       (setmaxnreg.inc 232), wait for `full`, issue four wgmma m64nNk16 (k steps of 16) straight
//       from the swizzled stage (no transposing copies: MN-major B goes through wgmma's
//       transpose bit), commit, and keep one group in flight: once the previous K tile's group
//       has completed (wgmma.wait_group 1) its stage goes back to the producer (`empty`); the
//       item's last stage after wait_group 0.
//
// Barrier phases: the CTA's g-th K tile (counted over all its items) uses stage g mod S in round
// r = g / S; consumers wait for `full` parity r mod 2, the producer for `empty` parity (r + 1) mod
// 2 (round 0 passes at once on fresh barriers). S stages of 32 KiB (shared_plan: 4, or 3 beside a
// triangular f32 D's two epilogue tiles), above the 48 KiB default (the launch opts in).
//
// The epilogue goes through shared memory (the epilogue tile, 128-byte swizzled TMA boxes):
//   1. C: the first consumer thread loads C's tile there by TMA once the previous item's store has
//      read it (bulk_wait_read), during the item's first K tile; `c_full` completes once per item.
//      Each consumer reads its fragment's C pairs (4-byte accesses, conflict-free under the
//      swizzle) and forms α·AB + β·C + γ·I in registers.
//   2. The consumers meet (named barrier 1: the producer never waits for the epilogue), write D's
//      pairs into the tile (4- or 8-byte shared stores, conflict-free), fence them for the async
//      proxy, meet again, and the first consumer thread stores the tile with one TMA store per box
//      (16-byte-and-wider global writes; rows and columns beyond M and N are not written, as the
//      loads beyond them arrive as zeros, so partial tiles need no other care).
//   3. A triangular product (D symmetric, m == n, upper tiles only) also writes the tile's
//      transpose: lanes l and l ^ 4 hold neighbouring rows, so one shuffle per pair gives each lane
//      two neighbouring elements of a column, a row of the transpose. Off the diagonal it goes to
//      the mirror tile, stored at (tj, ti); on the diagonal it replaces the strict lower triangle of
//      the tile itself (after a barrier). Either way D(j, i) holds the bits of D(i, j): D is exactly
//      symmetric.
#pragma once

#include "orthojit_device.cuh"
#include "orthojit_hopper_primitives.cuh"

namespace oj::hopper {

// The stored bits of a value of D's type (bf16 in the low half, or f32), and a pair of them
// written to shared memory in one access. The f32 bits come through an opaque mov (a primitive): with
// __float_as_uint the front end turned the loop-carried accumulators of the triangular kernels
// into integer registers, so the PTX read and wrote them between wgmma.fence/mma_async and
// wait_group (undefined in the PTX ISA, "Asynchronous Warpgroup Level Matrix Instructions"), and
// ptxas repaired it by waiting for every K tile's products (C7517/C7519): no overlap left.
template <typename TD>
__device__ __forceinline__ u32 stored_bits(float value) {
  if constexpr (sizeof(typename TD::storage) == 2) {
    return static_cast<u32>(TD::store(value));
  } else {
    return opaque_float_bits(value);
  }
}
template <u32 kBytes>
__device__ __forceinline__ void store_shared_pair(unsigned char* at, u32 first, u32 second) {
  if constexpr (kBytes == 2) *reinterpret_cast<u32*>(at) = first | (second << 16);
  else *reinterpret_cast<float2*>(at) = make_float2(__uint_as_float(first), __uint_as_float(second));
}

// Work item `item` of the schedule: slice `slice` (= z·splits + the split of K) of the batch,
// tile (ti, tj). Without split-K a slice is a matrix.
template <bool kTriangular>
__device__ __forceinline__ void work_item(int item, int per_matrix, int tiles_m, int tiles_n, int group, int& slice, int& ti, int& tj) {
  slice = item / per_matrix;
  const int index = item % per_matrix;
  if constexpr (kTriangular) {
    grouped_upper_tile(index, tiles_m, group, ti, tj);
  } else {
    u32 row = 0, col = 0;
    grouped_tile(static_cast<u32>(index), static_cast<u32>(tiles_m), static_cast<u32>(tiles_n), static_cast<u32>(group), row, col);
    ti = static_cast<int>(row);
    tj = static_cast<int>(col);
  }
}

// The whole persistent kernel body: `items` work items (batch x splits x tiles per matrix) of a
// product with tiles_m x tiles_n tiles of D (square for a triangular one), K = k, bands of `group`
// tile rows. c_map is null without C (kHasC false). Split-K (splits > 1): split s of matrix z
// takes K tiles [s·q, min((s + 1)·q, K tiles)), q = ceil(K tiles / splits), every split non-empty
// (the host checks it: split_k_valid), and stores its partial product as matrix z·splits + s of
// D's map (an f32 workspace, α = 1, no C, no γ; a reduction kernel adds the splits).
template <bool kBMnMajor, bool kTriangular, bool kHasC, typename TD, u32 kN = kTileN>
__device__ __forceinline__ void product_tile(const TensorMap& a_map, const TensorMap& b_map, const TensorMap* c_map, const TensorMap& d_map, int k,
                                             float alpha, float beta, float gamma, int tiles_m, int tiles_n, int group, int items, int splits) {
  constexpr u32 kD = sizeof(typename TD::storage);
  static_assert(kN == kTileN || (kN == kWideTileN && !kTriangular && kD == 2), "the 128 x 256 tile is for dense products with a bf16 D");
  constexpr SharedPlan kPlan = shared_plan(kD, kTriangular, kN);
  constexpr u32 kStage = stage_bytes(kN);
  constexpr u32 kStages = kPlan.stages, kBoxBytes = kTileM * kSwizzleBytes, kBoxColumns = epilogue_columns_per_box(kD);
  // The stages start on a 1024-byte boundary of the shared window (the swizzle atom; TMA's and
  // wgmma's 128-byte swizzle are functions of the address bits 4-9).
  unsigned char* const window_start = dynamic_shared_window();
  const u32 window = shared_address(window_start);
  unsigned char* const shared = window_start + (kSwizzleAtomBytes - window % kSwizzleAtomBytes) % kSwizzleAtomBytes;
  unsigned char* const d_tile = shared + kPlan.d_tile;
  unsigned char* const mirror_tile = shared + kPlan.mirror_tile;
  u64* const full = reinterpret_cast<u64*>(shared + kPlan.barriers);
  u64* const empty = full + kStages;
  u64* const c_full = empty + kStages;
  const u32 thread = threadIdx.x, group_index = thread / 128;
  const int k_tiles = (k + static_cast<int>(kTileK) - 1) / static_cast<int>(kTileK), per_split = (k_tiles + splits - 1) / splits;
  const int per_matrix = kTriangular ? tiles_m * (tiles_m + 1) / 2 : tiles_m * tiles_n;
  if (thread == 0) {
    for (u32 s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);                 // the producer's arrive (with the bytes)
      barrier_init(&empty[s], kConsumerGroups);  // one arrival per consumer warpgroup
    }
    barrier_init(c_full, 1);  // the first consumer thread's arrive (with C's bytes)
    barrier_init_fence();
  }
  __syncthreads();

  if (group_index == 0) {
    registers_decrease<kProducerRegisters>();
    if (thread != 0) return;
    u32 g = 0;
    for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x)) {
      int slice, ti, tj;
      work_item<kTriangular>(item, per_matrix, tiles_m, tiles_n, group, slice, ti, tj);
      const int z = slice / splits, t_begin = slice % splits * per_split, t_end = t_begin + per_split < k_tiles ? t_begin + per_split : k_tiles;
      const int m0 = ti * static_cast<int>(kTileM), n0 = tj * static_cast<int>(kN);
      for (int t = t_begin; t < t_end; ++t, ++g) {
        const u32 s = g % kStages, round = g / kStages;
        barrier_wait(&empty[s], (round + 1) % 2);
        barrier_arrive_expect_bytes(&full[s], kStage);
        unsigned char* const stage = shared + s * kStage;
        const int k0 = t * static_cast<int>(kTileK);
        tma_load_3d(stage, &a_map, k0, m0, z, &full[s]);
        if (kBMnMajor) {
#pragma unroll
          for (u32 block = 0; block < kN / 64; ++block)
            tma_load_3d(stage + kStageABytes + block * 64 * kSwizzleBytes, &b_map, n0 + static_cast<int>(block * 64), k0, z, &full[s]);
        } else {
          tma_load_3d(stage + kStageABytes, &b_map, k0, n0, z, &full[s]);
        }
      }
    }
    return;
  }

  registers_increase<kConsumerRegisters>();
  const u32 consumer = group_index - 1, local = thread % 128, lane = thread % 32;
  const bool leader = thread == 128;  // issues the epilogue's TMA loads and stores
  u32 g = 0, done = 0;                // K tiles consumed, items finished
  float accumulator[kN / 2];
  for (int item = static_cast<int>(blockIdx.x); item < items; item += static_cast<int>(gridDim.x), ++done) {
    int slice, ti, tj;
    work_item<kTriangular>(item, per_matrix, tiles_m, tiles_n, group, slice, ti, tj);
    const int z = slice / splits, t_begin = slice % splits * per_split, t_end = t_begin + per_split < k_tiles ? t_begin + per_split : k_tiles;
    const int m0 = ti * static_cast<int>(kTileM), n0 = tj * static_cast<int>(kN);
    for (int t = t_begin; t < t_end; ++t, ++g) {
      const u32 s = g % kStages, round = g / kStages;
      barrier_wait(&full[s], round % 2);
      const u32 a = shared_address(shared + s * kStage), b = a + kStageABytes;
      wgmma_fence();
#pragma unroll
      for (u32 j = 0; j < kTileK / 16; ++j)
        wgmma_bf16<kN, kBMnMajor>(accumulator, a_descriptor(a, consumer, j), kBMnMajor ? b_descriptor_mn_major(b, j) : b_descriptor_k_major(b, j),
                                  (t > t_begin || j > 0) ? 1 : 0);
      wgmma_commit();
      if (kHasC && t == t_begin && leader) {
        // C's tile into the epilogue tile, once the previous item's store has read it (issued
        // after the first products, so the wait overlaps them).
        bulk_wait_read<0>();
        barrier_arrive_expect_bytes(c_full, kTileM * kN * 2);
#pragma unroll
        for (u32 box = 0; box < kN / 64; ++box) tma_load_3d(d_tile + box * kBoxBytes, c_map, n0 + static_cast<int>(box * 64), m0, z, c_full);
      }
      // The previous K tile's products have completed once at most this tile's group is running:
      // its stage may be overwritten.
      wgmma_wait<1>();
      if (t > t_begin && local == 0) barrier_arrive(&empty[(g - 1) % kStages]);
    }
    wgmma_wait<0>();
    if (local == 0) barrier_arrive(&empty[(g - 1) % kStages]);

    // 1. α·AB + β·C + γ·I in registers. Registers 2q and 2q + 1 are neighbouring columns of one row.
    if (kHasC) barrier_wait(c_full, done % 2);
#pragma unroll
    for (u32 r = 0; r < kN / 2; r += 2) {
      const EpiloguePair at = epilogue_c_pair(consumer, local, r);
      // Each operation rounded on its own (f32_mul/f32_add, no FMA contraction): the emulation's bits.
      float value0 = f32_mul(alpha, accumulator[r]), value1 = f32_mul(alpha, accumulator[r + 1]);
      if (kHasC) {
        const u32 bits = *reinterpret_cast<const u32*>(d_tile + swizzle_128b(epilogue_offset(at.row, at.col, 2)));
        value0 = f32_add(value0, f32_mul(beta, bf16_to_f32(static_cast<u16>(bits & 0xffffu))));
        value1 = f32_add(value1, f32_mul(beta, bf16_to_f32(static_cast<u16>(bits >> 16))));
      }
      const int global_row = m0 + static_cast<int>(at.row), global_col = n0 + static_cast<int>(at.col);
      if (global_row == global_col) value0 = f32_add(value0, gamma);
      if (global_row == global_col + 1) value1 = f32_add(value1, gamma);
      accumulator[r] = value0;
      accumulator[r + 1] = value1;
    }
    // 2. The tile is free: C read by every consumer, or (without C) the last store's reads done.
    if (!kHasC && leader) bulk_wait_read<0>();
    consumer_barrier();
#pragma unroll
    for (u32 r = 0; r < kN / 2; r += 2) {
      // The pair is register r or (f32, odd rows) r ^ 8: a select between two values read at
      // constant indices. (Values, not `moved ? accumulator[a] : accumulator[b]`: that is an
      // lvalue, one load from a selected address, which puts the accumulators on the stack.)
      const EpiloguePair at = epilogue_d_pair(consumer, local, r, kD);
      const bool moved = at.reg != r;
      const float own0 = accumulator[r], own1 = accumulator[r + 1];
      const float other0 = accumulator[r ^ 8], other1 = accumulator[(r ^ 8) + 1];
      store_shared_pair<kD>(d_tile + swizzle_128b(epilogue_offset(at.row, at.col, kD)), stored_bits<TD>(moved ? other0 : own0),
                            stored_bits<TD>(moved ? other1 : own1));
    }
    // 3. The transpose: the lane of the even row takes the pair's first column (its own element
    // and the odd row's below it), the lane of the odd row the second (the even row's and its own).
    const bool diagonal = kTriangular && ti == tj;
    if (kTriangular) {
      if (diagonal) consumer_barrier();  // the pairs below overwrite what step 2 wrote there
      const bool even = (lane / 4) % 2 == 0;
      unsigned char* const target = diagonal ? d_tile : mirror_tile;
#pragma unroll
      for (u32 r = 0; r < kN / 2; r += 2) {
        const EpiloguePair at = epilogue_mirror_pair(consumer, local, r);
        const u32 first = stored_bits<TD>(accumulator[r]), second = stored_bits<TD>(accumulator[r + 1]);
        const u32 got = shfl_xor(even ? second : first, 4);
        // On the diagonal only the strict lower triangle (the pair's first column left of the
        // row; its second is then on or left of the diagonal, whose value it repeats).
        if (!diagonal || at.col < at.row)
          store_shared_pair<kD>(target + swizzle_128b(epilogue_offset(at.row, at.col, kD)), even ? first : got, even ? got : second);
      }
    }
    fence_proxy_async_shared();
    consumer_barrier();
    if (leader) {
#pragma unroll
      for (u32 box = 0; box < kN / kBoxColumns; ++box) tma_store_3d(&d_map, n0 + static_cast<int>(box * kBoxColumns), m0, slice, d_tile + box * kBoxBytes);
      if (kTriangular && !diagonal) {
#pragma unroll
        for (u32 box = 0; box < kTileM / kBoxColumns; ++box)
          tma_store_3d(&d_map, m0 + static_cast<int>(box * kBoxColumns), n0, slice, mirror_tile + box * kBoxBytes);
      }
      bulk_commit();
    }
  }
  // The last stores complete before the CTA (and its shared memory) ends.
  if (leader) bulk_wait<0>();
}

}  // namespace oj::hopper
