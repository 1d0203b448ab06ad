// The index math of orthojit's sm_90a products: WGMMA shared-memory descriptors, the 128-byte
// swizzle that TMA writes and WGMMA reads, and where each accumulator register of a warpgroup
// lands in the 64 x N tile. Plain C++ usable on the host and on the device (OJ_HD), so that the
// host side (hopper_product.cpp) and the kernels share one set of constants, the host tests check
// it against the PTX ISA, and the host emulation decodes what the kernels encode. It lives beside
// the host side (the CUDA backend may not include kernels/); kernels/CMakeLists.txt embeds it with
// the device headers under the name the kernels include.
//
// Sources (PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"):
//   * Matrix descriptor (64 bits): start address bits 0-13, leading-dimension byte offset (LBO)
//     bits 16-29, stride-dimension byte offset (SBO) bits 32-45, each the byte value >> 4; base
//     offset bits 49-51 (0: every tile here starts 1024-byte aligned); swizzle mode bits 62-63
//     (0 none, 1 128-byte, 2 64-byte, 3 32-byte).
//   * Canonical 128-byte-swizzled layouts of 16-bit elements (T = 8 elements per 16 bytes), as
//     CUTLASS's cute/atom/mma_traits_sm90_gmma.hpp also states them:
//       K-major:  ((8, m), (T, 2)) : ((8T, SBO), (1, T))    rows of 64 elements (128 bytes) along
//                 K, 8 rows per 1024-byte swizzle atom, atoms SBO apart along M/N; LBO unused.
//       MN-major: ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))   rows of 64 elements along M/N,
//                 8 K rows per atom, blocks of 64 M/N elements LBO apart, atoms SBO apart along K.
//   * 128-byte swizzle: the 16-byte chunk (address bits 4-6) XOR the row within the 1024-byte atom
//     (address bits 7-9); TMA's CU_TENSOR_MAP_SWIZZLE_128B writes the same pattern (CUDA driver
//     API, cuTensorMapEncodeTiled), which is why the two meet without any shuffling.
//   * Accumulator of wgmma .m64nNk16 .f32, thread t of the warpgroup (warp w = t / 32, lane l):
//     register 4i + 2h + e holds D[16w + l/4 + 8h][8i + 2(l % 4) + e], i < N/8, h, e in {0, 1}.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define OJ_HD __host__ __device__ __forceinline__
#else
#define OJ_HD inline
#endif

namespace oj::hopper {

typedef unsigned long long u64;
typedef unsigned int u32;

constexpr u32 kSwizzleBytes = 128;   // one swizzled row: 64 16-bit elements
constexpr u32 kSwizzleAtomBytes = 1024;  // 8 rows: the unit the XOR pattern repeats over

enum class Swizzle : u32 { None = 0, Bytes128 = 1, Bytes64 = 2, Bytes32 = 3 };

struct Descriptor {
  u32 start = 0, leading = 0, stride = 0, base_offset = 0;  // bytes (start: shared address)
  Swizzle swizzle = Swizzle::None;
};

// The 64-bit WGMMA matrix descriptor of a shared-memory operand.
OJ_HD u64 encode_descriptor(u32 start_address, u32 leading_bytes, u32 stride_bytes, Swizzle swizzle) {
  return (static_cast<u64>((start_address >> 4) & 0x3fff)) | (static_cast<u64>((leading_bytes >> 4) & 0x3fff) << 16) |
         (static_cast<u64>((stride_bytes >> 4) & 0x3fff) << 32) | (static_cast<u64>(static_cast<u32>(swizzle)) << 62);
}
OJ_HD Descriptor decode_descriptor(u64 bits) {
  Descriptor d;
  d.start = static_cast<u32>(bits & 0x3fff) << 4;
  d.leading = static_cast<u32>((bits >> 16) & 0x3fff) << 4;
  d.stride = static_cast<u32>((bits >> 32) & 0x3fff) << 4;
  d.base_offset = static_cast<u32>((bits >> 49) & 0x7);
  d.swizzle = static_cast<Swizzle>(static_cast<u32>(bits >> 62) & 0x3);
  return d;
}

// Where the byte at logical shared address `address` really is under the 128-byte swizzle.
OJ_HD u32 swizzle_128b(u32 address) { return address ^ (((address >> 7) & 0x7) << 4); }

// The byte address of element (mn, k) of a canonical 128-byte-swizzled 16-bit operand whose
// descriptor is `d`, before the swizzle (the hardware swizzles the sum).
OJ_HD u32 k_major_address(const Descriptor& d, u32 mn, u32 k) { return d.start + (mn % 8) * kSwizzleBytes + (mn / 8) * d.stride + k * 2; }
OJ_HD u32 mn_major_address(const Descriptor& d, u32 mn, u32 k) {
  return d.start + (mn % 64) * 2 + (mn / 64) * d.leading + (k % 8) * kSwizzleBytes + (k / 8) * d.stride;
}

// The accumulator element register `r` of warpgroup thread `t` holds, for .m64nNk16.
struct Coordinate {
  u32 row, col;
};
OJ_HD Coordinate accumulator_coordinate(u32 t, u32 r) {
  const u32 warp = t / 32, lane = t % 32, i = r / 4, h = (r / 2) % 2, e = r % 2;
  return {16 * warp + lane / 4 + 8 * h, 8 * i + 2 * (lane % 4) + e};
}

// The products' tile shape: a CTA computes BM x BN with two consumer warpgroups of 64 rows each,
// K in steps of BK = 64 (one swizzled row of 16-bit elements), through the stages of shared_plan.
// BN is 128, or 256 (kWideTileN) for dense products with a bf16 D: each consumer then issues
// wgmma m64n256k16 and holds 128 accumulators, twice the work per A row loaded from shared
// memory (the shape CUTLASS's and cuBLAS's large Hopper GEMMs use).
constexpr u32 kTileM = 128, kTileN = 128, kTileK = 64;
constexpr u32 kWideTileN = 256;
constexpr u32 kConsumerGroups = 2, kThreads = 128 * (1 + kConsumerGroups);
// setmaxnreg's per-thread counts: the producer warpgroup keeps 40, the consumers take 232
// (128·40 + 256·232 = 64512 of the SM's 65536; each a multiple of 8, as the instruction requires).
constexpr u32 kProducerRegisters = 40, kConsumerRegisters = 232;
// Shared memory of one stage: A (128 rows x 128 bytes), then B (BN x 128 bytes in either layout:
// K-major as BN rows of N, MN-major as BN/64 blocks of 64 columns by 64 K rows each).
constexpr u32 kStageABytes = kTileM * kSwizzleBytes, kStageBBytes = kTileN * kSwizzleBytes;
constexpr u32 kStageBytes = kStageABytes + kStageBBytes;
OJ_HD constexpr u32 stage_bytes(u32 tile_n) { return kStageABytes + tile_n * kSwizzleBytes; }
// What one block may have on compute capability 9.0 (CUDA C++ Programming Guide, "Technical
// Specifications per Compute Capability": 227 KiB of shared memory per block, opted in).
constexpr u32 kMaxDynamicSharedBytes = 227 * 1024;

// The epilogue's shared tile: D's 128 x 128 tile of `element_bytes`-byte elements as TMA boxes of
// 128-byte rows (64 bf16 or 32 f32 columns x 128 rows, 16 KiB each, 128-byte swizzled), what one
// TMA store per box writes to D (and what the TMA loads of C, bf16, fill first). Element (row, col)
// of the tile is at this offset from the tile's 1024-byte aligned start, before the swizzle.
OJ_HD constexpr u32 epilogue_columns_per_box(u32 element_bytes) { return kSwizzleBytes / element_bytes; }
OJ_HD constexpr u32 epilogue_offset(u32 row, u32 col, u32 element_bytes) {
  return (col / epilogue_columns_per_box(element_bytes)) * kTileM * kSwizzleBytes + row * kSwizzleBytes + (col % epilogue_columns_per_box(element_bytes)) * element_bytes;
}

// The epilogue's shared accesses, per consumer thread `local` (0..127) of warpgroup `consumer`:
// in instruction r (even, 0..62) of each step the thread moves the accumulator pair (reg, reg + 1),
// elements (row, col) and (row, col + 1) of the CTA's tile (for the mirror: of its transpose).
// tests/cuda_bank_conflict_test.cpp counts the wavefronts of each from these same functions.
struct EpiloguePair {
  u32 reg, row, col;
};
// Step 1, C's bf16 pair (4 bytes): register r where the accumulator has it. The 8 rows of an
// instruction start 128 bytes apart, their 16-byte chunks XOR-swizzled by row: 32 distinct banks.
OJ_HD EpiloguePair epilogue_c_pair(u32 consumer, u32 local, u32 r) {
  const Coordinate at = accumulator_coordinate(local, r);
  return {r, consumer * 64 + at.row, at.col};
}
// Step 2, D's pair (4 bytes for bf16, 8 for f32). For f32 the 4 lanes of a row cover two chunks,
// c and c ^ 1, so rows r and r ^ 1 (which the swizzle XORs by the same chunk pair) would meet in
// the same banks inside a half-warp (2 wavefronts where 1 does): the lanes of odd rows store the
// pair 16 columns away (register r ^ 8) in the same instruction instead, which moves their chunk
// pair by 2 and gives the 4 rows of each half-warp distinct ones. Every register is still stored
// once (r ^ 8 runs over the same set); the index stays a compile-time constant for each choice.
OJ_HD EpiloguePair epilogue_d_pair(u32 consumer, u32 local, u32 r, u32 element_bytes) {
  const u32 reg = element_bytes == 4 ? r ^ (8 * ((local % 32) / 4 % 2)) : r;
  const Coordinate at = accumulator_coordinate(local, reg);
  return {reg, consumer * 64 + at.row, at.col};
}
// Step 3, a triangular tile's transpose: lanes l and l ^ 4 (rows 2q and 2q + 1) swap halves of
// their pairs (one shuffle), so that the even row's lane holds column c of both rows and the odd
// row's column c + 1: mirror element (row, col) = D (col, row), pairs along the mirror's rows.
OJ_HD EpiloguePair epilogue_mirror_pair(u32 consumer, u32 local, u32 r) {
  const bool even = (local % 32) / 4 % 2 == 0;
  const Coordinate at = accumulator_coordinate(local, r);
  const u32 row = consumer * 64 + at.row;
  return {r, even ? at.col : at.col + 1, even ? row : row - 1};
}

// The shared window of a tile kernel, from its 1024-byte aligned start: the pipeline's stages; the
// epilogue's D tile; for a triangular product its mirror (the tile's transpose, stored at (tj, ti));
// then the barriers full[stages], empty[stages] and c_full (the TMA loads of C), 8 bytes each. As
// many stages as fit beside the epilogue's tiles, at most kMaxStages: 4 for every D but a
// triangular f32 one (3: 2 x 64 KiB of epilogue tiles).
constexpr u32 kMaxStages = 4;
struct SharedPlan {
  u32 stages, d_tile, mirror_tile, barriers, bytes;  // offsets, and the bytes in all
};
// With the 128 x 256 tile (bf16 D, dense): 3 stages of 48 KiB beside the 64 KiB epilogue tile.
OJ_HD constexpr SharedPlan shared_plan(u32 d_element_bytes, bool triangular, u32 tile_n = kTileN) {
  const u32 tile = kTileM * tile_n * d_element_bytes, epilogue = tile * (triangular ? 2 : 1), stage = stage_bytes(tile_n);
  const u32 fit = (kMaxDynamicSharedBytes - kSwizzleAtomBytes - epilogue - (2 * kMaxStages + 1) * 8) / stage;
  const u32 stages = fit < kMaxStages ? fit : kMaxStages;
  const u32 barriers = stages * stage + epilogue;
  return {stages, stages * stage, stages * stage + tile, barriers, barriers + (2 * stages + 1) * 8};
}
// The dynamic shared memory a launch asks for: 1 KiB more, so that the kernel can align its
// stages to the 1024-byte swizzle atom whatever the base the runtime gives it.
OJ_HD constexpr u32 dynamic_shared_bytes(u32 d_element_bytes, bool triangular, u32 tile_n = kTileN) {
  return shared_plan(d_element_bytes, triangular, tile_n).bytes + kSwizzleAtomBytes;
}

// The persistent schedule of a rectangular product: work item `index` of a tiles_m x tiles_n grid
// in bands of `group` tile rows, each band column by column (Triton's GROUP_SIZE_M order), so the
// CTAs running at once share a band's row panels and a few column panels in L2. Triangular
// products use grouped_upper_tile (orthojit_device.cuh, tile_schedule.h).
OJ_HD void grouped_tile(u32 index, u32 tiles_m, u32 tiles_n, u32 group, u32& ti, u32& tj) {
  const u32 per_band = group * tiles_n, first = index / per_band * group;
  const u32 rows = group < tiles_m - first ? group : tiles_m - first, within = index % per_band;
  ti = first + within % rows;
  tj = within / rows;
}

// Descriptors of k-step j (16 elements of K) of a stage whose A starts at `a` and B at `b`
// (shared addresses, 1024-byte aligned), for consumer warpgroup g.
OJ_HD u64 a_descriptor(u32 a, u32 g, u32 j) { return encode_descriptor(a + g * 64 * kSwizzleBytes + j * 32, 16, kSwizzleAtomBytes, Swizzle::Bytes128); }
// K-major B (the operand stored as N x K rows): N rows of 128 bytes, k-step j 32 bytes along them.
OJ_HD u64 b_descriptor_k_major(u32 b, u32 j) { return encode_descriptor(b + j * 32, 16, kSwizzleAtomBytes, Swizzle::Bytes128); }
// MN-major B (stored K x N): BN/64 blocks of 64 columns, 64 K rows of 128 bytes each (8 KiB
// apart: LBO); k-step j starts 16 rows (2 atoms) further.
OJ_HD u64 b_descriptor_mn_major(u32 b, u32 j) {
  return encode_descriptor(b + j * 16 * kSwizzleBytes, 64 * kSwizzleBytes, kSwizzleAtomBytes, Swizzle::Bytes128);
}

}  // namespace oj::hopper
