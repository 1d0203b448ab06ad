// The sm_90a product tile (kernels/cuda/orthojit_hopper_product.cuh) without a GPU:
//   * its layout math against the PTX ISA: descriptor bit fields, the 128-byte swizzle, the
//     accumulator fragment, and that the descriptors of each k step address exactly the elements
//     the TMA boxes put in the stage;
//   * NVRTC for sm_90a: no spills, no stack, the register budget setmaxnreg assumes; sm_90 refuses
//     it (wgmma needs the `a` target);
//   * the SASS (cuobjdump): HGMMA, UTMALDG, the mbarrier waits, USETMAXREG, no local memory;
//   * the whole kernel run in the host emulation (tests/hopper_host_emulation.h: asynchronous
//     wgmma, mbarrier phases, swizzled TMA boxes) against an f64 product of the same bf16 values,
//     on shapes with several rounds of the 4 stages and ragged edges, with the output poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/hopper_product.h"
#include "support/bf16_bits.h"
#include "cuda/nvrtc_compiler.h"
#include "cuda_binutils.h"
#include "cuda/orthojit_hopper_layout.cuh"
#include "emulated_device_headers.h"
#include "kernels/cuda_device_headers.h"

namespace orthojit::cuda {
namespace {

using namespace oj::hopper;

TEST(HopperLayout, DescriptorBitFieldsAreThePtxIsas) {
  // start 0x1400 -> 0x140 in bits 0-13; LBO 16 -> 1 in bits 16-29; SBO 1024 -> 64 in bits 32-45;
  // 128-byte swizzle = 1 in bits 62-63.
  const u64 bits = encode_descriptor(0x1400, 16, 1024, Swizzle::Bytes128);
  EXPECT_EQ(bits, u64{0x140} | (u64{1} << 16) | (u64{64} << 32) | (u64{1} << 62));
  EXPECT_EQ(encode_descriptor(0x3fff0, 0, 0, Swizzle::None), u64{0x3fff});  // the address's top bits are the field's
  EXPECT_EQ(encode_descriptor(0, 0, 0, Swizzle::Bytes32) >> 62, 3u);
  const Descriptor d = decode_descriptor(encode_descriptor(0x8a40, 8192, 1024, Swizzle::Bytes128));
  EXPECT_EQ(d.start, 0x8a40u);
  EXPECT_EQ(d.leading, 8192u);
  EXPECT_EQ(d.stride, 1024u);
  EXPECT_EQ(d.base_offset, 0u);
  EXPECT_EQ(d.swizzle, Swizzle::Bytes128);
}

TEST(HopperLayout, Swizzle128PermutesTheChunksOfEachRowByTheRow) {
  // Within each 1024-byte atom: the 16-byte chunk c of row r moves to chunk c ^ r; bytes within a
  // chunk and everything above the atom stay.
  for (u32 base : {0u, 1024u, 0x2400u, 0x9c00u}) {
    std::set<u32> images;
    for (u32 offset = 0; offset < 1024; ++offset) {
      const u32 row = offset / 128, chunk = (offset / 16) % 8, byte = offset % 16;
      const u32 image = swizzle_128b(base + offset);
      EXPECT_EQ(image, base + row * 128 + (chunk ^ row) * 16 + byte);
      images.insert(image);
    }
    EXPECT_EQ(images.size(), 1024u);  // a permutation of the atom
  }
}

TEST(HopperLayout, AccumulatorFragmentCoversTheTileOnce) {
  for (u32 n : {kTileN, kWideTileN}) {  // m64n128k16 (64 registers) and m64n256k16 (128)
    std::set<std::pair<u32, u32>> seen;
    for (u32 t = 0; t < 128; ++t)
      for (u32 r = 0; r < n / 2; ++r) {
        const Coordinate at = accumulator_coordinate(t, r);
        EXPECT_LT(at.row, 64u);
        EXPECT_LT(at.col, n);
        seen.insert({at.row, at.col});
      }
    EXPECT_EQ(seen.size(), 64u * n);
  }
  // The PTX ISA's figure for .m64nNk16 .f32: lane 5 of warp 0 holds rows 1 and 9, columns 2-3 of
  // each 8-column block; warp 3 starts at row 48.
  EXPECT_EQ(accumulator_coordinate(5, 0).row, 1u);
  EXPECT_EQ(accumulator_coordinate(5, 1).col, 3u);
  EXPECT_EQ(accumulator_coordinate(5, 2).row, 9u);
  EXPECT_EQ(accumulator_coordinate(5, 6).col, 10u);
  EXPECT_EQ(accumulator_coordinate(96, 0).row, 48u);
}

// What the stage holds: element (row, k) of a TMA box of 128-byte rows at `base` lies at the
// swizzled address of base + row·128 + 2k. The descriptors of k step j must decode (through the
// canonical layouts) to exactly those addresses.
TEST(HopperLayout, StepDescriptorsAddressWhatTheTmaBoxesWrote) {
  const u32 a = 0x8000, b = a + kStageABytes;
  for (u32 j = 0; j < kTileK / 16; ++j)
    for (u32 k = 0; k < 16; ++k) {
      for (u32 g = 0; g < kConsumerGroups; ++g)
        for (u32 row = 0; row < 64; ++row)
          ASSERT_EQ(swizzle_128b(k_major_address(decode_descriptor(a_descriptor(a, g, j)), row, k)), swizzle_128b(a + (64 * g + row) * 128 + (16 * j + k) * 2));
      for (u32 n = 0; n < kWideTileN; ++n) {
        // K-major B: one box of 128 (or, the wide tile, 256) N rows x 64 k. MN-major: boxes of 64
        // K rows x 64 n, each next one 64 rows of 128 bytes after the one before (2 or 4 of them).
        ASSERT_EQ(swizzle_128b(k_major_address(decode_descriptor(b_descriptor_k_major(b, j)), n, k)), swizzle_128b(b + n * 128 + (16 * j + k) * 2));
        ASSERT_EQ(swizzle_128b(mn_major_address(decode_descriptor(b_descriptor_mn_major(b, j)), n, k)),
                  swizzle_128b(b + (n / 64) * 64 * 128 + (16 * j + k) * 128 + (n % 64) * 2));
      }
    }
}

// The kernels the tests instantiate, as the host side writes them: B K-major with bf16 D, with and
// without C, and B MN-major with f32 D and C (C bf16).
const HopperProductSpec kKMajor{false, ScalarType::BF16, true}, kKMajorNoC{false, ScalarType::BF16, false}, kMnMajor{true, ScalarType::F32, true};
// The 128 x 256 tile (bf16 D): K-major B with C, MN-major B without.
const HopperProductSpec kKMajorWide{false, ScalarType::BF16, true, true}, kMnMajorWideNoC{true, ScalarType::BF16, false, true};
const HopperProductSpec* const kEntrySpecs[] = {&kKMajor, &kKMajorNoC, &kMnMajor, &kKMajorWide, &kMnMajorWideNoC};
std::string entry_source() {
  std::string source;
  for (const HopperProductSpec* spec : kEntrySpecs) source += hopper_product_source(*spec);
  return source;
}

TEST(HopperProduct, HostSideSaysWhatItCannotRunAndAsksForTheBoxesTheKernelReads) {
  EXPECT_EQ(kKMajor.kernel_name(), "orthojit_hopper_product_kmajor_bf16_c");
  EXPECT_EQ(kKMajorNoC.kernel_name(), "orthojit_hopper_product_kmajor_bf16");
  EXPECT_EQ(kMnMajor.kernel_name(), "orthojit_hopper_product_mnmajor_f32_c");
  EXPECT_EQ(hopper_product_unsupported_reason(kKMajor, 1000, 4096, 4096, 90), "");
  EXPECT_NE(hopper_product_unsupported_reason(kKMajor, 1024, 1024, 1024, 80).find("compute capability 9.0"), std::string::npos);
  EXPECT_NE(hopper_product_unsupported_reason(kKMajor, 1024, 1024, 1020, 90).find("k = 1020 is not a multiple of 8"), std::string::npos);
  EXPECT_EQ(hopper_product_unsupported_reason(kKMajor, 1024, 1001, 1024, 90), "");  // a K-major B's rows are K long
  EXPECT_NE(hopper_product_unsupported_reason(kMnMajor, 1024, 1001, 1024, 90).find("n = 1001"), std::string::npos);
  // The operands of one launch: C exactly when the kernel adds it, rows of C and D at least n long
  // and 16-byte aligned, every base 16-byte aligned; each refusal names what and why.
  const uint64_t at = 1 << 20;
  EXPECT_EQ(hopper_operands_unsupported_reason(kKMajor, 1000, 1000, 1008, at, at, at, at), "");
  EXPECT_EQ(hopper_operands_unsupported_reason(kKMajorNoC, 1000, 0, 1000, at, at, 0, at), "");
  EXPECT_NE(hopper_operands_unsupported_reason(kKMajor, 1000, 1000, 1008, at, at, 0, at).find("needs C"), std::string::npos);
  EXPECT_NE(hopper_operands_unsupported_reason(kKMajorNoC, 1000, 1000, 1008, at, at, at, at).find("has no C"), std::string::npos);
  EXPECT_NE(hopper_operands_unsupported_reason(kKMajor, 1000, 992, 1008, at, at, at, at).find("ldc = 992 is less than n = 1000"), std::string::npos);
  EXPECT_NE(hopper_operands_unsupported_reason(kKMajor, 1000, 1004, 1008, at, at, at, at).find("ldc = 1004 is not a multiple of 8"), std::string::npos);
  EXPECT_NE(hopper_operands_unsupported_reason(kKMajor, 1000, 1000, 992, at, at, at, at).find("ldd = 992 is less than n = 1000"), std::string::npos);
  EXPECT_NE(hopper_operands_unsupported_reason(kMnMajor, 1000, 1000, 1002, at, at, at, at).find("ldd = 1002 is not a multiple of 4"), std::string::npos);
  EXPECT_EQ(hopper_operands_unsupported_reason(kMnMajor, 1000, 1000, 1004, at, at, at, at), "") << "f32 D: rows of 4 elements make 16 bytes";
  EXPECT_NE(hopper_operands_unsupported_reason(kKMajor, 1000, 1000, 1008, at, at + 8, at, at).find("B at "), std::string::npos);
  EXPECT_NE(hopper_operands_unsupported_reason(kKMajor, 1000, 1000, 1008, at, at, at, at + 2).find("D at "), std::string::npos);
  EXPECT_THROW(hopper_product_source({false, ScalarType::F16}), std::invalid_argument);
  EXPECT_THROW(hopper_product_source({false, ScalarType::F32, true, true}), std::invalid_argument);  // the wide tile writes bf16
  // The boxes: A 64 k x 128 rows; K-major B 64 k x 128 rows of Bᵀ; MN-major B 64 n x 64 k (two
  // per stage): each one row of 128 bytes wide, as the 128-byte swizzle requires, and together
  // the stage's bytes, which the producer's expect_tx announces.
  const TensorMapRequest a = hopper_a_map(300, 200), bk = hopper_b_map(kKMajor, 136, 200), bm = hopper_b_map(kMnMajor, 136, 200);
  EXPECT_EQ(a.dims[0], 200u);
  EXPECT_EQ(a.dims[1], 300u);
  EXPECT_EQ(a.row_bytes, 400u);
  EXPECT_EQ(bk.dims[0], 200u);
  EXPECT_EQ(bk.dims[1], 136u);
  EXPECT_EQ(bm.dims[0], 136u);
  EXPECT_EQ(bm.dims[1], 200u);
  EXPECT_EQ(bm.row_bytes, 272u);
  for (const TensorMapRequest& r : {a, bk, bm}) EXPECT_EQ(r.box[0] * 2, kSwizzleBytes);
  EXPECT_EQ(a.box[0] * a.box[1] * 2, kStageABytes);
  EXPECT_EQ(bk.box[0] * bk.box[1] * 2, kStageBBytes);
  EXPECT_EQ(2 * bm.box[0] * bm.box[1] * 2, kStageBBytes);
  // The 128 x 256 tile: K-major B in one box of 256 rows (TMA's largest), MN-major in four of 64
  // columns, 32 KiB of B per stage either way.
  const TensorMapRequest wide_k = hopper_b_map(kKMajorWide, 300, 200), wide_mn = hopper_b_map(kMnMajorWideNoC, 300, 200);
  EXPECT_EQ(wide_k.box[1], kWideTileN);
  EXPECT_LE(wide_k.box[1], 256u);
  EXPECT_EQ(wide_k.box[0] * wide_k.box[1] * 2, stage_bytes(kWideTileN) - kStageABytes);
  EXPECT_EQ(kWideTileN / 64 * wide_mn.box[0] * wide_mn.box[1] * 2, stage_bytes(kWideTileN) - kStageABytes);
  // C and D: boxes of one 128-byte row (64 bf16 or 32 f32 columns) x 128 rows, what the epilogue
  // tile holds per box; D's element size is its type's.
  const TensorMapRequest cm = hopper_c_map(300, 136, 144), dk = hopper_d_map(kKMajor, 300, 136, 144), dm = hopper_d_map(kMnMajor, 300, 136, 144);
  EXPECT_EQ(cm.dims[0], 136u);
  EXPECT_EQ(cm.row_bytes, 288u);
  EXPECT_EQ(dk.element_bytes, 2u);
  EXPECT_EQ(dm.element_bytes, 4u);
  EXPECT_EQ(dm.row_bytes, 576u);
  for (const TensorMapRequest& r : {cm, dk, dm}) {
    EXPECT_EQ(r.box[0] * r.element_bytes, kSwizzleBytes);
    EXPECT_EQ(r.box[1], kTileM);
    EXPECT_EQ(epilogue_offset(0, r.box[0], r.element_bytes), kTileM * kSwizzleBytes) << "the next box starts 128 rows of 128 bytes on";
  }
}

// The shared window: stages, the epilogue's tile(s) and the barriers within the 227 KiB a block may
// have, every part 1024-byte aligned where TMA or wgmma reads it, four stages where they fit.
TEST(HopperLayout, SharedPlanFitsTheStagesBesideTheEpilogueTiles) {
  for (u32 bytes : {2u, 4u})
    for (bool triangular : {false, true}) {
      const SharedPlan plan = shared_plan(bytes, triangular);
      SCOPED_TRACE(std::to_string(bytes) + (triangular ? " triangular" : ""));
      EXPECT_EQ(plan.stages, bytes == 4 && triangular ? 3u : 4u);
      EXPECT_EQ(plan.d_tile, plan.stages * kStageBytes);
      EXPECT_EQ(plan.d_tile % kSwizzleAtomBytes, 0u);
      EXPECT_EQ(plan.mirror_tile, plan.d_tile + kTileM * kTileN * bytes);
      EXPECT_EQ(plan.barriers, plan.d_tile + kTileM * kTileN * bytes * (triangular ? 2 : 1));
      EXPECT_EQ(plan.bytes, plan.barriers + (2 * plan.stages + 1) * 8);
      EXPECT_LE(dynamic_shared_bytes(bytes, triangular), kMaxDynamicSharedBytes);
    }
  // The 128 x 256 tile (dense, bf16 D): three 48 KiB stages beside its 64 KiB epilogue tile.
  const SharedPlan wide = shared_plan(2, false, kWideTileN);
  EXPECT_EQ(wide.stages, 3u);
  EXPECT_EQ(wide.d_tile, 3 * stage_bytes(kWideTileN));
  EXPECT_EQ(wide.d_tile % kSwizzleAtomBytes, 0u);
  EXPECT_EQ(wide.barriers, wide.d_tile + kTileM * kWideTileN * 2);
  EXPECT_LE(dynamic_shared_bytes(2, false, kWideTileN), kMaxDynamicSharedBytes);
  // The epilogue tile's element offsets cover its bytes once (a permutation after the swizzle too).
  for (u32 bytes : {2u, 4u}) {
    std::set<u32> seen;
    for (u32 row = 0; row < kTileM; ++row)
      for (u32 col = 0; col < kTileN; ++col) seen.insert(swizzle_128b(epilogue_offset(row, col, bytes)) / bytes);
    EXPECT_EQ(seen.size(), kTileM * kTileN);
    EXPECT_EQ(*seen.rbegin(), kTileM * kTileN - 1);
  }
}

// The rectangular persistent order visits every tile once, in bands of `group` rows.
TEST(HopperLayout, GroupedTileOrderVisitsEveryTileOnce) {
  for (auto [tiles_m, tiles_n, group] : {std::tuple{8u, 32u, 8u}, {11u, 3u, 8u}, {1u, 5u, 8u}, {17u, 17u, 4u}}) {
    std::set<std::pair<u32, u32>> seen;
    for (u32 index = 0; index < tiles_m * tiles_n; ++index) {
      u32 ti = 0, tj = 0;
      grouped_tile(index, tiles_m, tiles_n, group, ti, tj);
      ASSERT_LT(ti, tiles_m);
      ASSERT_LT(tj, tiles_n);
      EXPECT_EQ(ti / group, index / (group * tiles_n)) << "the band of item " << index;
      seen.insert({ti, tj});
    }
    EXPECT_EQ(seen.size(), tiles_m * tiles_n);
  }
}

TEST(HopperProduct, CompilesForSm90aWithoutSpillsAndNotForSm90) {
  const NvrtcOutput output = compile_cuda(entry_source(), kernels::cuda_device_headers(), "sm_90a");
  ASSERT_EQ(output.resources.size(), std::size(kEntrySpecs)) << output.log;
  for (const auto& [name, resources] : output.resources) {
    SCOPED_TRACE(name);
    EXPECT_EQ(resources.spill_store_bytes, 0) << output.log;
    EXPECT_EQ(resources.spill_load_bytes, 0) << output.log;
    EXPECT_EQ(resources.stack_bytes, 0) << output.log;
    // Launched with 384 threads at one CTA per SM: at most 65536 / 384 = 170 registers each, and
    // the consumers' setmaxnreg.inc to 232 fits only because the producer gives 128 x (168 - 40) back.
    EXPECT_LE(resources.registers * 384, 65536);
    EXPECT_LE(kProducerRegisters * 128 + kConsumerRegisters * 256, 65536u);
    EXPECT_EQ(resources.shared_bytes, 0) << "all shared memory is dynamic";
  }
  // ptxas serializes the wgmma pipeline (C7514, C7517, C7519, ...) when other instructions touch
  // the accumulators between an mma_async and its wait: the products would then not overlap.
  EXPECT_EQ(wgmma_serialization_messages(output), "");
  EXPECT_THROW(compile_cuda(entry_source(), kernels::cuda_device_headers(), "sm_90"), CudaCompileError);
}

// Every instantiation of the tile the generator can write (B K- or MN-major, triangular or not,
// with or without C, bf16 or f32 D, the wide tile; splits of K a run-time value) compiles for
// sm_90a without spills and with its wgmma pipeline intact. The triangular f32 ones once lost
// it: their epilogue's float-to-bits cast made ptxas see accumulator uses between mma_async and
// wait (C7517/C7519 under NVRTC), and it waited for every K tile's products before the next.
TEST(HopperProduct, EveryTileInstantiationKeepsItsWgmmaPipelineWithoutSpills) {
  std::string source = "#include \"orthojit_hopper_product.cuh\"\n";
  int kernels = 0;
  for (const bool mn : {false, true})
    for (const bool triangular : {false, true})
      for (const bool has_c : {false, true})
        for (const bool f32 : {false, true})
          for (const int n : {128, 256}) {
            if (n == 256 && (triangular || f32)) continue;  // the wide tile: dense, bf16 D
            const std::string name = std::string("tile_") + (mn ? "mn" : "k") + (triangular ? "_tri" : "") + (has_c ? "_c" : "") + (f32 ? "_f32" : "_bf16") + "_" + std::to_string(n);
            const std::string map = "const __grid_constant__ oj::hopper::TensorMap ";
            source += "extern \"C\" __global__ void __launch_bounds__(384, 1) " + name + "(" + map + "a_map, " + map + "b_map, " + map + "c_map, " + map +
                      "d_map, int k, int tiles_m, int tiles_n, int items, int splits, float alpha, float beta, float gamma) {\n  oj::hopper::product_tile<" +
                      (mn ? "true" : "false") + ", " + (triangular ? "true" : "false") + ", " + (has_c ? "true" : "false") + ", " + (f32 ? "oj::F32" : "oj::Bf16") + ", " +
                      std::to_string(n) + ">(a_map, b_map, " + (has_c ? "&c_map" : "nullptr") + ", d_map, k, alpha, beta, gamma, tiles_m, tiles_n, 8, items, splits);\n}\n";
            ++kernels;
          }
  const NvrtcOutput output = compile_cuda(source, kernels::cuda_device_headers(), "sm_90a");
  ASSERT_EQ(output.resources.size(), static_cast<size_t>(kernels)) << output.log;
  for (const auto& [name, resources] : output.resources) {
    SCOPED_TRACE(name);
    EXPECT_EQ(resources.spill_store_bytes + resources.spill_load_bytes + resources.stack_bytes, 0) << output.log;
    EXPECT_LE(resources.registers * 384, 65536);
  }
  EXPECT_EQ(wgmma_serialization_messages(output), "");
}

TEST(HopperProduct, SassHasHgmmaTmaBarrierWaitsAndRegisterReallocationWithoutLocalMemory) {
  std::string looked;
  const std::string folder = binutils(looked);
  if (folder.empty()) GTEST_SKIP() << "cuobjdump and nvdisasm not found in:" << looked << " (scripts/install-deps.sh installs them from PyPI)";
  const auto sass = sass_by_function(folder, compile_cuda(entry_source(), kernels::cuda_device_headers(), "sm_90a"));
  for (const HopperProductSpec* spec : kEntrySpecs) {
    const std::string kernel = spec->kernel_name();
    SCOPED_TRACE(kernel);
    const auto found = sass.find(kernel);
    ASSERT_NE(found, sass.end());
    const std::string& code = found->second;
    EXPECT_NE(code.find(spec->wide ? "HGMMA.64x256x16.F32.BF16" : "HGMMA.64x128x16.F32.BF16"), std::string::npos);
    EXPECT_NE(code.find("UTMALDG.3D"), std::string::npos);
    EXPECT_NE(code.find("UTMASTG.3D"), std::string::npos) << "D leaves through TMA stores";
    EXPECT_NE(code.find("SYNCS.PHASECHK.TRANS64.TRYWAIT"), std::string::npos);
    EXPECT_NE(code.find("USETMAXREG"), std::string::npos);
    EXPECT_EQ(code.find("LDL"), std::string::npos) << "local memory loads";
    EXPECT_EQ(code.find("STL"), std::string::npos) << "local memory stores";
    // No transposing shared stores: B reaches wgmma as TMA wrote it, and the epilogue writes pairs.
    EXPECT_EQ(code.find("STS.U16"), std::string::npos);
    // No 16-bit or 32-bit global stores: the epilogue's are TMA's.
    EXPECT_EQ(code.find("STG.E.U16"), std::string::npos);
    EXPECT_EQ(code.find("STG.E "), std::string::npos);
  }
}

// ---- the kernel in the host emulation ----

struct EmulatedCase {
  int m, n, k;
  bool b_mn_major;  // 128 x 128: the f32-output kernel; the others have bf16 D
  float alpha, beta, gamma;  // beta 0: the kernel without C
  int ctas;                  // the persistent grid (fewer than the tiles: CTAs run several)
  bool wide = false;         // the 128 x 256 tile (bf16 D; with C when K-major, without when MN-major)
};

// Compiles the kernels against the emulation and runs one case; returns D (m x ldd) or nothing
// when no host compiler is at hand. The inputs are written to files; D starts as 0xFF bytes.
struct Emulated {
  std::vector<uint16_t> a, b, c;  // a: m x k; b: k x n (MN-major case) or n x k (K-major case); c: m x ldc
  std::vector<unsigned char> d;
  int ldc = 0, ldd = 0;
};

const HopperProductSpec& spec_of(const EmulatedCase& c) {
  if (c.wide) return c.b_mn_major ? kMnMajorWideNoC : kKMajorWide;
  return c.b_mn_major ? kMnMajor : c.beta != 0 ? kKMajor : kKMajorNoC;
}
bool f32_d(const EmulatedCase& c) { return spec_of(c).d_type == ScalarType::F32; }

bool run_emulated(const EmulatedCase& c, Emulated& data, const std::string& name) {
  if (std::system("command -v c++ > /dev/null 2>&1") != 0) return false;
  const std::filesystem::path directory = std::filesystem::path(::testing::TempDir()) / ("orthojit_hopper_emulation_" + name);
  std::filesystem::create_directories(directory);
  emulation::write_emulated_device_headers(directory, true);
  const HopperProductSpec& spec = spec_of(c);
  const int element = f32_d(c) ? 4 : 2, tile_n = static_cast<int>(spec.tile_n());
  const int tiles_m = (c.m + 127) / 128, tiles_n = (c.n + tile_n - 1) / tile_n;
  std::ostringstream driver;
  driver << "#define OJ_EMULATION_DYNAMIC_SHARED_ONLY\n#include <cstdio>\n#include <vector>\n#include \"kernel.cu\"\n"
         << "template <class T> std::vector<T> read(const char* path, size_t count) {\n"
         << "  std::vector<T> v(count);\n  std::FILE* f = std::fopen(path, \"rb\");\n  if (!f || std::fread(v.data(), sizeof(T), count, f) != count) std::abort();\n"
         << "  std::fclose(f);\n  return v;\n}\n"
         << "void rows(oj::hopper::TensorMap& map, void* base, unsigned bytes, int inner, int outer, int stride, unsigned box_outer) {\n"
         << "  map.base = static_cast<unsigned char*>(base); map.element_bytes = bytes; map.inner = inner; map.outer = outer;\n"
         << "  map.row_elements = stride; map.matrix_elements = (unsigned long long)stride * outer; map.box_inner = 128 / bytes; map.box_outer = box_outer;\n}\n"
         << "int main() {\n  const int m = " << c.m << ", n = " << c.n << ", k = " << c.k << ", ldc = " << data.ldc << ", ldd = " << data.ldd << ";\n"
         << "  auto a = read<unsigned short>(\"a.bin\", " << data.a.size() << ");\n"
         << "  auto b = read<unsigned short>(\"b.bin\", " << data.b.size() << ");\n"
         << "  auto c = read<unsigned short>(\"c.bin\", " << data.c.size() << ");\n"
         << "  std::vector<unsigned char> d(size_t(m) * ldd * " << element << ", 0xff);\n"
         << "  oj::hopper::TensorMap a_map, b_map, c_map, d_map;\n"
         << "  rows(a_map, a.data(), 2, k, m, k, 128);\n"
         << (c.b_mn_major ? "  rows(b_map, b.data(), 2, n, k, n, 64);\n" : "  rows(b_map, b.data(), 2, k, n, k, " + std::to_string(tile_n) + ");\n")
         << "  rows(c_map, c.data(), 2, n, m, ldc, 128);\n"
         << "  rows(d_map, d.data(), " << element << ", n, m, ldd, 128);\n"
         << "  const unsigned grid[3] = {" << c.ctas << ", 1, 1};\n"
         << "  oj_emu::run_grid(grid, 384, [&] { " << spec.kernel_name() << "(a_map, b_map, " << (spec.has_c ? "c_map, " : "") << "d_map, k, " << tiles_m << ", "
         << tiles_n << ", " << tiles_m * tiles_n << ", float(" << c.alpha << "), float(" << c.beta << "), float(" << c.gamma << ")); });\n"
         << "  std::FILE* out = std::fopen(\"d.bin\", \"wb\");\n  std::fwrite(d.data(), 1, d.size(), out);\n  std::fclose(out);\n}\n";
  std::ofstream(directory / "driver.cpp") << driver.str();
  std::ofstream(directory / "kernel.cu") << entry_source();
  auto write = [&](const char* file, const std::vector<uint16_t>& v) {
    std::ofstream(directory / file, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 2));
  };
  write("a.bin", data.a);
  write("b.bin", data.b);
  write("c.bin", data.c);
  const std::string quoted = "'" + directory.string() + "'";
  const int status = std::system(("cd " + quoted + " && c++ -std=c++20 -O1 -w -pthread -I. -o driver driver.cpp > build.log 2>&1 && ./driver > run.log 2>&1").c_str());
  EXPECT_EQ(status, 0) << "see " << directory / "build.log" << " and " << directory / "run.log";
  data.d.assign(static_cast<size_t>(c.m) * static_cast<size_t>(data.ldd) * static_cast<size_t>(element), 0);
  std::ifstream(directory / "d.bin", std::ios::binary).read(reinterpret_cast<char*>(data.d.data()), static_cast<std::streamsize>(data.d.size()));
  if (status == 0) std::filesystem::remove_all(directory);
  return true;
}

// D against the f64 product of the same bf16 values: every element within its own bound (f32
// accumulation of K products: K·2⁻²⁴·Σ|a||b| and as much again for the epilogue; bf16 D: half an
// ulp, 2⁻⁸·|D|), the red zone untouched. An index or phase slip gives errors of the order of the
// values themselves, in whole tiles.
TEST(HopperProduct, HostEmulationMatchesAnF64ProductOnEveryEdgeAndStageRound) {
  const EmulatedCase cases[] = {
      {128, 128, 64 * 9, false, 1.0f, 0.0f, 0.0f, 1},   // one tile, 9 K tiles: 3 rounds of the 4 stages, no C
      {200, 135, 104, false, 0.75f, -0.5f, 0.25f, 3},  // ragged M, N (odd) and K, C and γ
      {130, 248, 320, true, 1.0f, 0.5f, 0.0f, 3},      // MN-major B, f32 D, a ragged second tile column
      {300, 390, 136, false, 1.0f, 0.0f, 0.5f, 2},     // 12 tiles on 2 persistent CTAs: stage phases across items, no C
      {260, 300, 72, false, -1.0f, 2.0f, 0.0f, 2},     // 9 tiles on 2 CTAs with C: C's loads and stores on one tile
      // The 128 x 256 tile: K-major B with C and γ over 6 tiles (a ragged third tile row and
      // second tile column: its last two C boxes and D boxes partly or wholly outside), 3 stage
      // rounds on one item; MN-major B without C, four 64-column blocks per stage.
      {300, 440, 200, false, 0.5f, 1.5f, 0.75f, 2, true},
      {136, 264, 64 * 7, true, 1.0f, 0.0f, 0.0f, 1, true},
  };
  std::mt19937 random(20261203);
  std::normal_distribution<float> gaussian;
  for (const EmulatedCase& c : cases) {
    const std::string name = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + (c.b_mn_major ? "_mn" : "_k") + (c.wide ? "_n256" : "");
    SCOPED_TRACE(name);
    Emulated data;
    data.ldc = (c.n + 7) / 8 * 8;  // 16-byte aligned rows (TMA)
    data.ldd = data.ldc + 8;       // and 8 columns of red zone per row
    auto fill = [&](std::vector<uint16_t>& v, size_t count) {
      v.resize(count);
      for (auto& x : v) x = bf16_bits_of(gaussian(random));
    };
    fill(data.a, static_cast<size_t>(c.m) * static_cast<size_t>(c.k));
    fill(data.b, static_cast<size_t>(c.k) * static_cast<size_t>(c.n));
    fill(data.c, static_cast<size_t>(c.m) * static_cast<size_t>(data.ldc));
    if (!run_emulated(c, data, name)) GTEST_SKIP() << "no host c++ for the emulation";
    auto b_at = [&](int kk, int col) {
      return bf16_value(c.b_mn_major ? data.b[static_cast<size_t>(kk) * static_cast<size_t>(c.n) + static_cast<size_t>(col)]
                                    : data.b[static_cast<size_t>(col) * static_cast<size_t>(c.k) + static_cast<size_t>(kk)]);
    };
    int bad = 0, red_zone_written = 0;
    double worst = 0;
    for (int i = 0; i < c.m; ++i)
      for (int j = 0; j < data.ldd; ++j) {
        const size_t at = static_cast<size_t>(i) * static_cast<size_t>(data.ldd) + static_cast<size_t>(j);
        double got;
        uint32_t raw;
        if (f32_d(c)) {
          float value;
          std::memcpy(&value, &data.d[at * 4], 4);
          std::memcpy(&raw, &data.d[at * 4], 4);
          got = value;
        } else {
          uint16_t bits;
          std::memcpy(&bits, &data.d[at * 2], 2);
          raw = bits == 0xffff ? 0xffffffffu : bits;
          got = bf16_value(bits);
        }
        if (j >= c.n) {
          red_zone_written += raw != 0xffffffffu;
          continue;
        }
        double exact = 0, magnitude = 0;
        for (int kk = 0; kk < c.k; ++kk) {
          const double product = bf16_value(data.a[static_cast<size_t>(i) * static_cast<size_t>(c.k) + static_cast<size_t>(kk)]) * b_at(kk, j);
          exact += product;
          magnitude += std::fabs(product);
        }
        const double cij = c.beta != 0 ? bf16_value(data.c[static_cast<size_t>(i) * static_cast<size_t>(data.ldc) + static_cast<size_t>(j)]) : 0.0;
        const double reference = c.alpha * exact + c.beta * cij + (i == j ? c.gamma : 0.0);
        const double bound = 2.0 * c.k * std::ldexp(1.0, -24) * (std::fabs(c.alpha) * magnitude + std::fabs(c.beta * cij) + std::fabs(c.gamma)) +
                             (f32_d(c) ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8)) * std::fabs(reference) + 1e-30;
        const double error = std::isnan(got) ? INFINITY : std::fabs(got - reference);
        worst = std::max(worst, error / bound);
        if (error > bound && ++bad <= 5) ADD_FAILURE() << "D(" << i << ", " << j << ") = " << got << ", f64 reference " << reference << " (bound " << bound << ")";
      }
    EXPECT_EQ(bad, 0) << "worst error / bound " << worst;
    EXPECT_EQ(red_zone_written, 0);
  }
}

}  // namespace
}  // namespace orthojit::cuda
