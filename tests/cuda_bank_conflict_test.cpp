// Shared-memory bank conflicts of the generated product kernels, computed on the host from the
// index formulas the generator prints (compiler/cuda/shared_layout.h): for every tile
// configuration the codegen can emit (tile_configs() and the defaults), every operand form (A
// k- or m-contiguous, B k- or n-contiguous) and every chunk width (16-byte, 4-byte and 2-byte
// moves), each shared access of the kernel (the tile stores, cp.async or from registers, and the
// fragment reads, 32-bit loads or ldmatrix) is evaluated for every lane of every warp and every
// value of its loops, and its wavefronts counted by the hardware's rule:
//   * 32 banks of 4 bytes; lanes reading the same 32-bit word share it (a broadcast), and writes
//     of different bytes of one word do not conflict (CUDA C++ Programming Guide, "Shared Memory"
//     for compute capability 5.x and later:
//     https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#shared-memory-5-x);
//   * the lanes are served in groups that ask for at most 128 bytes: all 32 lanes for 4-byte and
//     smaller accesses, half-warps for 8 bytes, quarter-warps (8 lanes) for 16 bytes; cp.async's
//     16-byte shared writes are counted like a 16-byte store;
//   * ldmatrix: each 8x8 matrix's 8 row addresses (16 bytes each) are one group (PTX ISA,
//     "ldmatrix": https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-instructions-ldmatrix).
// A group needs as many wavefronts as the most distinct words any one bank holds; the least it
// can need is its distinct words / 32, rounded up. More than the least anywhere is a conflict:
// the test fails naming the access, the configuration, the warp, the loop values and the lanes.
// The stores must also cover the tile exactly once (the chunk placement is a bijection).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "cuda/cuda_codegen.h"
#include "cuda/orthojit_hopper_layout.cuh"
#include "cuda/shared_layout.h"
#include "passes/pipeline.h"
#include "dsl/parser.h"

namespace orthojit::cuda {
namespace {

struct Count {
  int64_t instructions = 0, wavefronts = 0, minimum = 0;
  std::string first_conflict;  // empty: none
};

// One warp instruction: the byte address of each lane (-1: the lane gives none).
void count_instruction(const SharedAccess& access, const std::vector<int64_t>& address, const std::string& where, Count& count) {
  const int group = access.ldmatrix_matrices ? 8 : access.bytes >= 16 ? 8 : access.bytes == 8 ? 16 : 32;
  ++count.instructions;
  for (int first = 0; first < 32; first += group) {
    std::map<int64_t, std::set<int64_t>> words_by_bank;
    std::set<int64_t> words;
    for (int lane = first; lane < first + group; ++lane) {
      if (address[lane] < 0) continue;
      for (int64_t word = address[lane] / 4; word <= (address[lane] + access.bytes - 1) / 4; ++word) {
        words_by_bank[word % 32].insert(word);
        words.insert(word);
      }
    }
    if (words.empty()) continue;
    size_t most = 0;
    for (const auto& [bank, in_bank] : words_by_bank) most = std::max(most, in_bank.size());
    const int64_t least = (static_cast<int64_t>(words.size()) + 31) / 32;
    count.wavefronts += static_cast<int64_t>(most);
    count.minimum += least;
    if (static_cast<int64_t>(most) > least && count.first_conflict.empty()) {
      std::ostringstream text;
      text << where << ", lanes " << first << "-" << first + group - 1 << ": " << most << " wavefronts where " << least << " would do; lane: byte offset (bank)";
      for (int lane = first; lane < first + group; ++lane)
        if (address[lane] >= 0) text << "  " << lane << ": " << address[lane] << " (" << address[lane] / 4 % 32 << ")";
      count.first_conflict = text.str();
    }
  }
}

std::string form_label(const GemmSharedPlan& plan) {
  return plan.tile.label() + (plan.a_k_contiguous ? " A k-contiguous" : " A m-contiguous") + (plan.b_k_contiguous ? ", B k-contiguous" : ", B n-contiguous") +
         ", chunks of " + std::to_string(plan.va) + "/" + std::to_string(plan.vb) + " halves" + (plan.pipelined ? ", cp.async" : ", register-staged");
}

// Every instruction of `access` in every warp of the CTA; `coverage` (when given) counts the
// elements each store writes.
Count count_access(const GemmSharedPlan& plan, const SharedAccess& access, std::vector<int>* coverage = nullptr) {
  Count count;
  const SharedTile& tile = access.tile;
  std::vector<size_t> position(access.loops.size(), 0);
  for (int warp = 0; warp < plan.tile.threads() / 32; ++warp) {
    std::fill(position.begin(), position.end(), 0);
    while (true) {
      std::vector<int64_t> address(32, -1);
      std::ostringstream where;
      where << access.what << " of " << form_label(plan) << ": warp " << warp;
      for (size_t l = 0; l < access.loops.size(); ++l) where << ", " << access.loops[l].first << " = " << access.loops[l].second[position[l]];
      const int lanes = access.ldmatrix_matrices ? 8 * access.ldmatrix_matrices : 32;
      for (int lane = 0; lane < lanes; ++lane) {
        std::map<std::string, int64_t> variables = {{"tid", warp * 32 + lane}};
        evaluate_definitions(plan.thread, variables);
        for (size_t l = 0; l < access.loops.size(); ++l) variables[access.loops[l].first] = access.loops[l].second[position[l]];
        evaluate_definitions(access.locals, variables);
        const int64_t row = access.row.eval(variables), col = access.col.eval(variables);
        const int64_t halves = access.bytes / 2;
        const bool inside = row >= 0 && row < tile.rows && col >= 0 && col + halves <= tile.cols;
        EXPECT_TRUE(inside) << where.str() << ", lane " << lane << ": element (" << row << ", " << col << ") outside the " << tile.rows << "x" << tile.cols << " tile";
        if (!inside) return count;
        EXPECT_EQ(((row * tile.pitch + col) * 2) % std::min<int64_t>(access.bytes, 16), 0) << where.str() << ", lane " << lane << ": misaligned";
        address[lane] = (row * tile.pitch + col) * 2;
        if (coverage)
          for (int64_t h = 0; h < halves; ++h) ++(*coverage)[static_cast<size_t>(row * tile.cols + col + h)];
      }
      count_instruction(access, address, where.str(), count);
      size_t l = 0;
      for (; l < position.size(); ++l) {
        if (++position[l] < access.loops[l].second.size()) break;
        position[l] = 0;
      }
      if (l == position.size()) break;
    }
  }
  return count;
}

std::vector<TileConfig> every_emitted_tile() {
  std::vector<TileConfig> tiles = tile_configs();
  for (const TileConfig& fallback : {default_tile_config(256, 256), default_tile_config(4096, 4096, true)}) {
    bool known = false;
    for (const TileConfig& tile : tiles) known |= tile.label() == fallback.label();
    if (!known) tiles.push_back(fallback);
  }
  return tiles;
}

TEST(CudaBankConflicts, EveryAccessOfEveryTileAndOperandFormIsConflictFree) {
  int forms = 0, pipelined = 0;
  for (const TileConfig& tile : every_emitted_tile())
    for (bool a_k : {true, false})
      for (bool b_k : {true, false})
        for (int va : {8, 2, 1})
          for (int vb : {8, 2, 1}) {
            // The generator refuses tiles whose chunks do not divide among the threads.
            if ((tile.bm * tile.bk / va) % tile.threads() != 0 || (tile.bn * tile.bk / vb) % tile.threads() != 0) continue;
            const GemmSharedPlan plan = gemm_shared_plan(tile, a_k, b_k, va, vb);
            ++forms;
            pipelined += plan.pipelined;
            for (const SharedAccess& access : plan.accesses()) {
              const bool store = access.what.find("store") != std::string::npos;
              std::vector<int> coverage(static_cast<size_t>(access.tile.rows * access.tile.cols), 0);
              const Count count = count_access(plan, access, store ? &coverage : nullptr);
              EXPECT_GT(count.instructions, 0);
              EXPECT_EQ(count.wavefronts, count.minimum) << count.first_conflict;
              if (store) {
                int64_t wrong = 0;
                for (int written : coverage) wrong += written != 1;
                EXPECT_EQ(wrong, 0) << access.what << " of " << form_label(plan) << ": " << wrong << " elements not written exactly once";
              }
            }
          }
  EXPECT_GE(forms, static_cast<int>(every_emitted_tile().size()) * 4);
  EXPECT_GT(pipelined, 0);
}

// A triangular product's mirror tile (the rounded tile written transposed from the accumulator,
// read back by rows for 16-byte stores of D's lower triangle): conflict-free for every square
// tile the generator gives a triangular product, each element written exactly once; without the
// swizzle, rows r and r + 8 of one store instruction share banks.
TEST(CudaBankConflicts, TheMirrorTileIsConflictFreeAndTheSwizzleIsWhy) {
  int planned = 0;
  for (const TileConfig& tile : every_emitted_tile()) {
    const int wn = tile.bn / tile.warps_n;
    if (tile.bm != tile.bn || tile.bm % 16 != 0 || (wn / 8) % 2 != 0) {
      EXPECT_THROW(gemm_shared_plan(tile, true, true, 8, 8, true), std::invalid_argument) << tile.label();
      continue;
    }
    const GemmSharedPlan plan = gemm_shared_plan(tile, true, true, 8, 8, true);
    ++planned;
    ASSERT_TRUE(plan.mirror);
    EXPECT_EQ(plan.accesses().size(), 6u);
    for (const SharedAccess* access : {&plan.mirror_store, &plan.mirror_read}) {
      std::vector<int> coverage(static_cast<size_t>(access->tile.rows * access->tile.cols), 0);
      const Count count = count_access(plan, *access, &coverage);
      EXPECT_GT(count.instructions, 0);
      EXPECT_EQ(count.wavefronts, count.minimum) << count.first_conflict;
      int64_t wrong = 0;
      for (int touched : coverage) wrong += touched != 1;
      EXPECT_EQ(wrong, 0) << access->what << " of " << form_label(plan) << ": " << wrong << " elements not covered exactly once";
    }
    // The generator reuses the stage memory only where the tile fits: the pipelined forms do.
    if (plan.pipelined) {
      EXPECT_TRUE(mirror_fits(plan)) << form_label(plan);
    }
    SharedAccess unswizzled = plan.mirror_store;
    unswizzled.col = IndexExpr::var("il");
    const Count conflicted = count_access(plan, unswizzled);
    EXPECT_EQ(conflicted.wavefronts, 2 * conflicted.minimum) << form_label(plan);
    EXPECT_NE(conflicted.first_conflict, "");
  }
  EXPECT_GE(planned, 3);
}

// The sm_90a tile's epilogue (kernels/cuda/orthojit_hopper_product.cuh): its shared accesses
// are the pairs of compiler/cuda/orthojit_hopper_layout.cuh's epilogue_*_pair functions, which
// the kernel calls, at swizzle_128b(epilogue_offset(...)) in the 128-byte-swizzled tile TMA loads
// C into and stores D from. Each is evaluated for every lane of the 8 consumer warps and every
// instruction r; D's and the mirror's stores must cover their tile exactly once, each register
// pair of a thread stored exactly once, at the coordinates the accumulator layout gives it.
enum class HopperEpilogueAccess { CRead, DStore, MirrorStore, DiagonalMirrorStore };

// `tile_n`: the tile's width, 128 or (the 128x256 tile, dense and bf16 only) 256.
Count count_hopper_epilogue(HopperEpilogueAccess kind, uint32_t element_bytes, bool plain_register_order, std::vector<int>& coverage,
                            uint32_t tile_n = oj::hopper::kTileN) {
  namespace hopper = oj::hopper;
  Count count;
  SharedAccess access;
  access.bytes = kind == HopperEpilogueAccess::CRead ? 4 : static_cast<int>(2 * element_bytes);
  const uint32_t offset_bytes = kind == HopperEpilogueAccess::CRead ? 2 : element_bytes;
  const char* names[] = {"C read", "D store", "mirror store", "diagonal mirror store"};
  for (uint32_t consumer = 0; consumer < hopper::kConsumerGroups; ++consumer)
    for (uint32_t warp = 0; warp < 4; ++warp) {
      std::set<uint32_t> registers[32];
      for (uint32_t r = 0; r < tile_n / 2; r += 2) {
        std::vector<int64_t> address(32, -1);
        std::ostringstream where;
        where << "sm_90a epilogue " << names[static_cast<int>(kind)] << " (" << element_bytes << "-byte D" << (plain_register_order ? ", plain register order" : "") << "): consumer " << consumer
              << ", warp " << warp << ", r = " << r;
        for (uint32_t lane = 0; lane < 32; ++lane) {
          const uint32_t local = warp * 32 + lane;
          hopper::EpiloguePair pair{};
          switch (kind) {
            case HopperEpilogueAccess::CRead: pair = hopper::epilogue_c_pair(consumer, local, r); break;
            case HopperEpilogueAccess::DStore:
              pair = plain_register_order ? hopper::epilogue_c_pair(consumer, local, r) : hopper::epilogue_d_pair(consumer, local, r, element_bytes);
              break;
            default: pair = hopper::epilogue_mirror_pair(consumer, local, r); break;
          }
          if (kind == HopperEpilogueAccess::DiagonalMirrorStore && pair.col >= pair.row) continue;  // the kernel's guard
          // The pair is where the accumulator layout puts register pair.reg (for the mirror: its
          // transpose, the even row's lane holding column c, the odd row's c + 1).
          const hopper::Coordinate at = hopper::accumulator_coordinate(local, pair.reg);
          if (kind == HopperEpilogueAccess::CRead || kind == HopperEpilogueAccess::DStore) {
            EXPECT_EQ(pair.row, consumer * 64 + at.row) << where.str() << ", lane " << lane;
            EXPECT_EQ(pair.col, at.col) << where.str() << ", lane " << lane;
          } else {
            const bool even = lane / 4 % 2 == 0;
            EXPECT_EQ(pair.row, at.col + (even ? 0u : 1u)) << where.str() << ", lane " << lane;
            EXPECT_EQ(pair.col + (even ? 0u : 1u), consumer * 64 + at.row) << where.str() << ", lane " << lane;
          }
          EXPECT_EQ(pair.reg % 2, 0u);
          EXPECT_TRUE(registers[lane].insert(pair.reg).second) << where.str() << ", lane " << lane << ": register " << pair.reg << " a second time";
          EXPECT_LT(pair.row, hopper::kTileM);
          EXPECT_LT(pair.col + 1, tile_n);
          if (pair.row >= hopper::kTileM || pair.col + 1 >= tile_n) return count;
          const uint32_t byte = hopper::swizzle_128b(hopper::epilogue_offset(pair.row, pair.col, offset_bytes));
          EXPECT_EQ(byte % static_cast<uint32_t>(access.bytes), 0u) << where.str() << ", lane " << lane << ": misaligned";
          address[lane] = byte;
          for (uint32_t e = 0; e < 2; ++e) ++coverage[pair.row * tile_n + pair.col + e];
        }
        count_instruction(access, address, where.str(), count);
      }
      if (kind != HopperEpilogueAccess::DiagonalMirrorStore) {
        for (const std::set<uint32_t>& each : registers) EXPECT_EQ(each.size(), tile_n / 4);
      }
    }
  return count;
}

TEST(CudaBankConflicts, TheHopperTileEpilogueIsConflictFreeAndCoversItsTiles) {
  namespace hopper = oj::hopper;
  for (uint32_t element_bytes : {2u, 4u})
    for (HopperEpilogueAccess kind : {HopperEpilogueAccess::CRead, HopperEpilogueAccess::DStore, HopperEpilogueAccess::MirrorStore, HopperEpilogueAccess::DiagonalMirrorStore}) {
      if (kind == HopperEpilogueAccess::CRead && element_bytes == 4) continue;  // C is bf16 whatever D is
      std::vector<int> coverage(hopper::kTileM * hopper::kTileN, 0);
      const Count count = count_hopper_epilogue(kind, element_bytes, false, coverage);
      EXPECT_EQ(count.instructions, 2 * 4 * 32);
      EXPECT_EQ(count.wavefronts, count.minimum) << count.first_conflict;
      // Each element once; on the diagonal the pairs that start left of it (the strict lower
      // triangle, and the diagonal elements that end such a pair, rewritten with their value).
      int64_t wrong = 0;
      for (uint32_t row = 0; row < hopper::kTileM; ++row)
        for (uint32_t col = 0; col < hopper::kTileN; ++col)
          wrong += coverage[row * hopper::kTileN + col] != (kind != HopperEpilogueAccess::DiagonalMirrorStore || col / 2 * 2 < row ? 1 : 0);
      EXPECT_EQ(wrong, 0) << static_cast<int>(kind) << ", " << element_bytes << "-byte D";
    }
  // Why f32 D's lanes of odd rows store register r ^ 8: in the plain order rows r and r ^ 1 of a
  // half-warp meet in one chunk pair, twice the wavefronts; bf16 has no such pair.
  std::vector<int> coverage(hopper::kTileM * hopper::kTileN, 0);
  const Count plain_f32 = count_hopper_epilogue(HopperEpilogueAccess::DStore, 4, true, coverage);
  EXPECT_EQ(plain_f32.wavefronts, 2 * plain_f32.minimum);
  EXPECT_NE(plain_f32.first_conflict.find("2 wavefronts where 1 would do"), std::string::npos) << plain_f32.first_conflict;
  std::fill(coverage.begin(), coverage.end(), 0);
  const Count plain_bf16 = count_hopper_epilogue(HopperEpilogueAccess::DStore, 2, true, coverage);
  EXPECT_EQ(plain_bf16.wavefronts, plain_bf16.minimum) << plain_bf16.first_conflict;
  // The 128x256 tile (bf16 D, dense): C's reads and D's stores over 128 registers per thread, the
  // four 64-column boxes of its epilogue tile, conflict-free and each element once.
  for (HopperEpilogueAccess kind : {HopperEpilogueAccess::CRead, HopperEpilogueAccess::DStore}) {
    std::vector<int> wide(hopper::kTileM * hopper::kWideTileN, 0);
    const Count count = count_hopper_epilogue(kind, 2, false, wide, hopper::kWideTileN);
    EXPECT_EQ(count.instructions, 2 * 4 * 64);
    EXPECT_EQ(count.wavefronts, count.minimum) << count.first_conflict;
    EXPECT_EQ(std::count(wide.begin(), wide.end(), 1), static_cast<int64_t>(wide.size())) << static_cast<int>(kind);
  }
}

// The counter finds what it is there to find: the placement the generator used before (chunk e
// at row e / chunks) on 64-byte rows puts rows 2q and 2q + 1 of each 8-lane group 80 bytes apart,
// so lanes 0 and 4 both hit banks 0-3; and rows without the 8-half padding make the 32-bit
// fragment loads of the 8 lanes g = 0..7 (64 bytes apart) meet in 2 banks of every 4.
TEST(CudaBankConflicts, TheCounterFindsThePlacementAndPaddingConflicts) {
  const GemmSharedPlan plan = gemm_shared_plan(TileConfig{64, 64, 32, 2, 2}, true, true, 8, 8);
  SharedAccess row_major = plan.a_store;
  const IndexExpr e = IndexExpr::var("e");
  row_major.locals = {{"e", IndexExpr::var("tid") + IndexExpr::var("s") * IndexExpr(plan.tile.threads())}, {"row", e / IndexExpr(4)}, {"col", e % IndexExpr(4) * IndexExpr(8)}};
  const Count conflicted = count_access(plan, row_major);
  EXPECT_EQ(conflicted.wavefronts, 2 * conflicted.minimum);
  EXPECT_NE(conflicted.first_conflict.find("lanes 0-7: 2 wavefronts where 1 would do"), std::string::npos) << conflicted.first_conflict;
  SharedAccess unpadded = plan.a_read;
  unpadded.tile.pitch = unpadded.tile.cols;
  const Count unpadded_count = count_access(plan, unpadded);
  EXPECT_GT(unpadded_count.wavefronts, unpadded_count.minimum);
  EXPECT_NE(unpadded_count.first_conflict, "");
  // And the layout the generator uses has neither.
  EXPECT_EQ(count_access(plan, plan.a_store).first_conflict, "");
  EXPECT_EQ(count_access(plan, plan.a_read).first_conflict, "");
}

// The generator prints these very formulas (a program whose products take every operand form
// the standard iteration has).
TEST(CudaBankConflicts, TheGeneratorPrintsThePlansFormulas) {
  const std::string text =
      "orthogonalizer one_step {\n  precision { storage = bf16; accumulate = f32; norm = f32; }\n  normalize frobenius(safety = 1.0, eps = 1e-7);\n"
      "  coefficients jordan repeat 1;\n  step {\n    A = X @ X.T;\n    B = b * A + c * A @ A;\n    X = a * X + B @ X;\n  }\n}\n";
  passes::CompileOptions options;
  options.rows = 128;
  options.cols = 512;
  const ir::Function function = passes::compile_program(dsl::parse_program(text), options);
  CodegenOptions codegen;
  codegen.gemm_tiles.assign(8, TileConfig{64, 64, 32, 2, 2});
  const std::string source = generate_cuda(function, codegen).source;
  for (bool b_k : {true, false}) {
    const GemmSharedPlan plan = gemm_shared_plan(TileConfig{64, 64, 32, 2, 2}, true, b_k, 8, 8);
    // The product's description returns each access's (row, col) from the plan's formulas.
    EXPECT_NE(source.find("return {" + plan.a_read.row.code() + ", " + plan.a_read.col.code() + "};"), std::string::npos) << plan.a_read.row.code();
    EXPECT_NE(source.find("return {" + plan.b_read.row.code() + ", " + plan.b_read.col.code() + "};"), std::string::npos) << plan.b_read.row.code();
    EXPECT_NE(source.find(definitions_code(plan.a_store.locals, "    ")), std::string::npos);
  }
}

TEST(CudaBankConflicts, IndexExpressionsPrintAndEvaluateAlike) {
  const IndexExpr a = IndexExpr::var("a"), b = IndexExpr::var("b");
  const IndexExpr expr = a * (b / IndexExpr(4)) - (a - b) % IndexExpr::named("N", 3);
  EXPECT_EQ(expr.code(), "a * (b / 4) - (a - b) % N");
  EXPECT_EQ(expr.eval({{"a", 7}, {"b", 9}}), 7 * (9 / 4) - (7 - 9) % 3);
  // ^ binds below + and *, as in C++: printed in parentheses inside them, bare at the top.
  const IndexExpr swizzle = (a / IndexExpr(8) ^ b * IndexExpr(2) % IndexExpr(4)) * IndexExpr(8) + a % IndexExpr(8);
  EXPECT_EQ(swizzle.code(), "(a / 8 ^ b * 2 % 4) * 8 + a % 8");
  EXPECT_EQ(swizzle.eval({{"a", 21}, {"b", 3}}), ((21 / 8) ^ (3 * 2 % 4)) * 8 + 21 % 8);
  EXPECT_EQ((a ^ (b + IndexExpr(1))).code(), "a ^ b + 1");
  EXPECT_THROW(expr.eval({{"a", 1}}), std::invalid_argument);
}

}  // namespace
}  // namespace orthojit::cuda
