// generate_cuda with the products on the sm_90a tile (CodegenOptions::hopper_products,
// compiler/cuda/hopper_codegen.h), without a GPU:
//   * which products go to the tile and what their launches carry: the grid (upper tiles only for
//     a triangular product), the tensor maps over the right buffers with the operands' strides,
//     written here from the shapes of the Newton–Schulz step, not from the generator;
//   * batches (grid.z, 3-D tensor maps) and every reason a product stays on the mma.sync kernels
//     (a fused Muon update,
//     strides TMA cannot read, f16, C or D of other layouts);
//   * the whole program through NVRTC for sm_90a: the tile's kernels without spills and within
//     the register budget, HGMMA and UTMALDG.3D in their SASS;
//   * the variant's label round trip. The values are checked in the emulation
//     (tests/cuda_generated_emulation_test.cpp, HopperTileProductsMatchTheReference) and on a GPU
//     (tests/cuda_device_test.cpp).
#include <gtest/gtest.h>

#include <optional>
#include <sstream>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_codegen.h"
#include "cuda/hopper_codegen.h"
#include "cuda/orthojit_hopper_layout.cuh"
#include "cuda/nvrtc_compiler.h"
#include "cuda_binutils.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "test_support.h"

namespace orthojit::cuda {
namespace {

ir::Function schedule(const char* program, int64_t rows, int64_t cols, int64_t batch, ir::StrategyKind strategy, ScalarType precision) {
  return testing::compile(kernels::load_program_by_name_or_path(program), rows, cols, strategy, precision, batch);
}

CudaProgram hopper_program(const ir::Function& function) {
  CodegenOptions options;
  options.hopper_products = true;
  return generate_cuda(function, options);
}

std::vector<const Launch*> products(const CudaProgram& program) {
  std::vector<const Launch*> found;
  for (const Launch& launch : program.launches)
    if (launch.product >= 0) found.push_back(&launch);
  return found;
}

TEST(HopperCodegen, StandardStepsSendEveryProductToTheTileWithTheirTensorMaps) {
  // jordan_ns5 at 1024 x 4096: per step X·Xᵀ (1024², k 4096, triangular, B = Xᵀ read K-major),
  // c·A·A + b·A (1024², k 1024, triangular, C = A), B·X + a·X (1024 x 4096, k 1024, B = X MN-major).
  const ir::Function function = schedule("jordan_ns5", 1024, 4096, 1, ir::StrategyKind::Standard, ScalarType::BF16);
  const CudaProgram program = hopper_program(function);
  EXPECT_TRUE(program.needs_sm90a());
  const std::vector<const Launch*> launches = products(program);
  ASSERT_EQ(launches.size(), 15u);
  for (size_t p = 0; p < launches.size(); ++p) {
    const Launch& launch = *launches[p];
    SCOPED_TRACE(launch.summary);
    ASSERT_TRUE(launch.hopper_tile());
    EXPECT_EQ(launch.block, 384);
    EXPECT_GT(launch.dynamic_shared_bytes, 128 * 1024);
    EXPECT_LE(launch.dynamic_shared_bytes, 227 * 1024);
    EXPECT_TRUE(launch.persistent);
    EXPECT_EQ(launch.grid[1], 1);
    EXPECT_EQ(launch.grid[2], 1);
    const bool has_c = p % 3 != 0;
    ASSERT_EQ(launch.tensor_maps.size(), has_c ? 4u : 3u);  // A, B, C (when there is one), D
    EXPECT_TRUE(launch.args.empty()) << "every operand goes through a tensor map";
    const Launch::TensorMapArg& d = launch.tensor_maps.back();
    EXPECT_EQ(d.request.dims[0], static_cast<uint64_t>(launch.n));
    EXPECT_EQ(d.request.dims[1], static_cast<uint64_t>(launch.m));
    EXPECT_EQ(d.request.box[1], 128u);
    for (const auto& map : launch.tensor_maps) {
      EXPECT_EQ(map.slot.kind, Slot::Kind::Buffer);
      EXPECT_GE(map.slot.buffer, 0);
      EXPECT_EQ(map.request.row_bytes % 16, 0u);
      EXPECT_EQ(map.request.element_bytes, 2u);  // bf16 everywhere in a bf16 program
      EXPECT_EQ(map.request.box[0], 64u);  // 128 bytes: one swizzled row
      EXPECT_EQ(map.request.dims[2], 1u);  // one matrix
      // The matrix stride is the planned buffer's (at least one matrix; 16-byte aligned).
      EXPECT_EQ(map.request.matrix_bytes, static_cast<uint64_t>(program.buffer_bytes[static_cast<size_t>(map.slot.buffer)]));
    }
    // The 2-D part of a request: inner and rows, the row stride, the box.
    auto plane = [](const TensorMapRequest& request) { return std::tuple{request.dims[0], request.dims[1], request.row_bytes, request.box[0], request.box[1]}; };
    using Plane = std::tuple<uint64_t, uint64_t, uint64_t, uint32_t, uint32_t>;
    const Plane a = plane(launch.tensor_maps[0].request), b = plane(launch.tensor_maps[1].request);
    switch (p % 3) {
      case 0:  // X·Xᵀ: A = X (1024 rows of 4096), B = Xᵀ stored as X (1024 rows of 4096), the same buffer
        EXPECT_TRUE(launch.triangular);
        EXPECT_EQ(launch.grid[0], 8 * 9 / 2);  // work items: the upper tiles
        EXPECT_EQ(a, (Plane{4096, 1024, 8192, 64, 128}));
        EXPECT_EQ(b, (Plane{4096, 1024, 8192, 64, 128}));
        EXPECT_EQ(launch.tensor_maps[0].slot.buffer, launch.tensor_maps[1].slot.buffer);
        EXPECT_EQ(plane(d.request), (Plane{1024, 1024, 2048, 64, 128}));
        break;
      case 1:  // A·A with C = A: both maps over A (1024 rows of 1024)
        EXPECT_TRUE(launch.triangular);
        EXPECT_EQ(launch.grid[0], 36);
        EXPECT_EQ(a, (Plane{1024, 1024, 2048, 64, 128}));
        EXPECT_EQ(launch.tensor_maps[0].slot.buffer, launch.tensor_maps[1].slot.buffer);
        EXPECT_EQ(launch.tensor_maps[2].slot.buffer, launch.tensor_maps[0].slot.buffer) << "C is A";
        EXPECT_EQ(plane(launch.tensor_maps[2].request), (Plane{1024, 1024, 2048, 64, 128}));
        EXPECT_EQ(std::get<4>(b), 64u);
        break;
      case 2:  // B·X: A = B (1024 x 1024), B = X MN-major (1024 rows of 4096 in 64 x 64 boxes), C = X
        EXPECT_FALSE(launch.triangular);
        EXPECT_EQ(launch.grid[0], 32 * 8);
        EXPECT_EQ(launch.ctas(132), 132) << "one wave of persistent CTAs";
        EXPECT_EQ(launch.ctas(0), 32 * 8) << "no device count: one CTA per item";
        EXPECT_EQ(a, (Plane{1024, 1024, 2048, 64, 128}));
        EXPECT_EQ(b, (Plane{4096, 1024, 8192, 64, 64}));
        EXPECT_EQ(launch.tensor_maps[2].slot.buffer, launch.tensor_maps[1].slot.buffer) << "C is X";
        EXPECT_EQ(plane(d.request), (Plane{4096, 1024, 8192, 64, 128}));
        break;
    }
    // The maps of this step read what the step's earlier launches wrote.
    if (p % 3 != 0) {
      EXPECT_EQ(launch.tensor_maps[0].slot.buffer, launches[p - 1]->tensor_maps.back().slot.buffer);
    }
  }
  // Without the option nothing changes: the mma.sync kernels, sm_90 code.
  const CudaProgram plain = generate_cuda(function);
  EXPECT_FALSE(plain.needs_sm90a());
  for (const Launch* launch : products(plain)) EXPECT_FALSE(launch->hopper_tile());
}

TEST(HopperCodegen, ProductsTheTileCannotReadStayOnTheMmaSyncKernels) {
  // f16 storage: no product on the tile.
  {
    const CudaProgram program = hopper_program(schedule("jordan_ns5", 256, 512, 1, ir::StrategyKind::Standard, ScalarType::F16));
    EXPECT_FALSE(program.needs_sm90a());
    for (const Launch* launch : products(program)) EXPECT_FALSE(launch->hopper_tile());
  }
  // A batch (32 heads of 128 x 512) is the work items' outer index and the maps' third dimension,
  // strided by the buffers.
  {
    const CudaProgram program = hopper_program(schedule("jordan_ns5", 128, 512, 32, ir::StrategyKind::Standard, ScalarType::BF16));
    ASSERT_EQ(products(program).size(), 15u);
    for (const Launch* launch : products(program)) {
      ASSERT_TRUE(launch->hopper_tile()) << launch->summary;
      EXPECT_EQ(launch->grid[0], 32 * (launch->triangular ? 1 : 4)) << "32 matrices of 1 upper tile (128²) or 1 x 4 tiles (128 x 512)";
      for (const auto& map : launch->tensor_maps) {
        EXPECT_EQ(map.request.dims[2], 32u);
        EXPECT_EQ(map.request.matrix_bytes * 32, static_cast<uint64_t>(program.buffer_bytes[static_cast<size_t>(map.slot.buffer)]));
      }
    }
  }
  // Rows TMA cannot address (300 columns: 600-byte rows) stay where they are; the 256-row
  // products of the same program do not need them and go to the tile.
  {
    const CudaProgram program = hopper_program(schedule("jordan_ns5", 256, 300, 1, ir::StrategyKind::Standard, ScalarType::BF16));
    int on_tile = 0, off_tile = 0;
    for (const Launch* launch : products(program)) (launch->hopper_tile() ? on_tile : off_tile)++;
    EXPECT_EQ(on_tile, 5) << "the A·A products (256 x 256, k 256)";
    EXPECT_EQ(off_tile, 10);
  }
  // The reasons, one request at a time from an eligible one.
  HopperProductRequest good;
  good.kernel = "gemm_7";
  good.a = {{ScalarType::BF16, 256, 512, 512, 1}, {Slot::Kind::Buffer, 0}, 256 * 512};
  good.b = good.a.transposed();
  good.d = {{ScalarType::BF16, 256, 256, 256, 1}, {Slot::Kind::Buffer, 1}, 256 * 256};
  good.m = good.n = 256;
  good.k = 512;
  ASSERT_EQ(hopper_ineligible_reason(good), "");
  auto reason = [&](auto change) {
    HopperProductRequest request = good;
    change(request);
    return hopper_ineligible_reason(request);
  };
  EXPECT_NE(reason([](auto& r) { r.batch = 70000; }).find("batch of 70000"), std::string::npos);
  EXPECT_EQ(reason([](auto& r) { r.batch = 2; }), "");
  EXPECT_NE(reason([](auto& r) { r.batch = 2, r.a.matrix_stride = 256 * 512 + 4; }).find("16-byte aligned strides"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.fused_update = true; }).find("Muon"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.a.row_stride = 500; }).find("16-byte aligned rows"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.b.col_stride = 500; }).find("16-byte aligned rows"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.a = r.a.transposed().transposed(), r.a.col_stride = 2; }).find("k-contiguous"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.a.slot = {Slot::Kind::Input, -1}; }).find("planned buffer"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.b.type = ScalarType::F16; }).find("bf16"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.d.type = ScalarType::F16; }).find("D is stored"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.has_c = true, r.c = r.d, r.c.type = ScalarType::F32; }).find("C is not"), std::string::npos);
  EXPECT_EQ(reason([](auto& r) { r.has_c = true, r.c = r.d; }), "");
  EXPECT_NE(reason([](auto& r) { r.has_c = true, r.c = r.d, r.c.row_stride = 260; }).find("C's rows are 260 elements apart"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.d.row_stride = 260; }).find("D's rows are 260 elements apart"), std::string::npos);
  EXPECT_EQ(reason([](auto& r) { r.d.type = ScalarType::F32, r.d.row_stride = 260; }), "") << "260 f32: 1040-byte rows";
  EXPECT_NE(reason([](auto& r) { r.d.slot = {Slot::Kind::Output, -1}; }).find("D is not a planned buffer"), std::string::npos);
  EXPECT_NE(reason([](auto& r) { r.triangular = true, r.n = 128; }).find("not square"), std::string::npos);
  HopperProductRequest bad = good;
  bad.batch = 70000;
  std::ostringstream ignored;
  EXPECT_THROW(emit_hopper_product(ignored, bad), std::invalid_argument);
}

TEST(HopperCodegen, WholeProgramCompilesForSm90aAndTheTileKernelsHaveHgmmaWithoutSpills) {
  for (const auto strategy : {ir::StrategyKind::Standard, ir::StrategyKind::Gram}) {
    const CudaProgram program = hopper_program(schedule("jordan_ns5", 1024, 4096, 1, strategy, ScalarType::BF16));
    SCOPED_TRACE(ir::to_string(strategy));
    const NvrtcOutput compiled = compile_cuda(program.source, kernels::cuda_device_headers(), "sm_90a");
    int tile_kernels = 0;
    for (const Launch& launch : program.launches) {
      if (!launch.hopper_tile()) continue;
      ++tile_kernels;
      const auto found = compiled.resources.find(launch.kernel);
      ASSERT_NE(found, compiled.resources.end()) << launch.kernel;
      EXPECT_EQ(found->second.spill_store_bytes + found->second.spill_load_bytes + found->second.stack_bytes, 0) << launch.kernel << "\n" << compiled.log;
      EXPECT_LE(found->second.registers * 384, 65536) << launch.kernel;
    }
    EXPECT_GT(tile_kernels, 0);
    EXPECT_EQ(wgmma_serialization_messages(compiled), "") << "ptxas serialized the wgmma pipeline";
    std::string looked;
    const std::string folder = binutils(looked);
    if (folder.empty()) continue;  // the SASS half needs cuobjdump (scripts/install-deps.sh)
    const auto sass = sass_by_function(folder, compiled);
    for (const Launch& launch : program.launches) {
      if (!launch.hopper_tile()) continue;
      const auto code = sass.find(launch.kernel);
      ASSERT_NE(code, sass.end()) << launch.kernel;
      EXPECT_NE(code->second.find("HGMMA.64x128x16.F32.BF16"), std::string::npos) << launch.kernel;
      EXPECT_NE(code->second.find("UTMALDG.3D"), std::string::npos) << launch.kernel;
      EXPECT_NE(code->second.find("UTMASTG.3D"), std::string::npos) << launch.kernel;
      EXPECT_EQ(code->second.find("LDL"), std::string::npos) << launch.kernel;
    }
  }
}

// Split-K on the tile (TileConfig::splits): the partial kernel's launch over batch x splits x
// tiles work items into one f32 workspace (rows padded to 16 bytes), then the reduction's launch
// reading it and writing the product's destination; an explicit split that leaves a split without
// K tiles is refused with the product and the numbers. Values: the emulation's split-K cases.
TEST(HopperCodegen, SplitKRunsPartialsIntoAnF32WorkspaceAndAReduction) {
  // gram_polar_express5 would do as well; jordan_ns5 at 256 x 1000: X·Xᵀ (256², k 1000 = 16 K
  // tiles, triangular: 3 upper tiles), A·A (k 256 = 4 K tiles), B·X (256 x 1000, k 256).
  const ir::Function function = schedule("jordan_ns5", 256, 1000, 2, ir::StrategyKind::Standard, ScalarType::BF16);
  CodegenOptions options;
  size_t products_seen = 0;
  for (const ir::Node& node : function.nodes)
    if (node.kind == ir::OpKind::Gemm) options.gemm_tiles.push_back(sm90a_tile(products_seen++ % 3 == 0 ? 4 : 1));
  const CudaProgram program = generate_cuda(function, options);
  int partials = 0, reductions = 0;
  for (size_t i = 0; i < program.launches.size(); ++i) {
    const Launch& launch = program.launches[i];
    if (!launch.kernel.ends_with("_splitk_partial")) continue;
    ++partials;
    SCOPED_TRACE(launch.summary);
    EXPECT_EQ(launch.tile.splits, 4);
    EXPECT_TRUE(launch.hopper_tile());
    EXPECT_TRUE(launch.triangular) << "every third product is X·Xᵀ";
    // 2 matrices x 4 splits x 3 upper tiles of 128 x 128, over at most that many CTAs.
    EXPECT_LE(launch.grid[0], 24);
    EXPECT_NE(launch.summary.find("persistent over 24 work items"), std::string::npos);
    const Slot& workspace = launch.destination();
    ASSERT_EQ(workspace.kind, Slot::Kind::Buffer);
    EXPECT_GE(program.buffer_bytes[static_cast<size_t>(workspace.buffer)], 2 * 4 * 256 * 256 * 4) << "f32 partials of every split";
    ASSERT_LT(i + 1, program.launches.size());
    const Launch& reduction = program.launches[i + 1];
    EXPECT_FALSE(reduction.hopper_tile());
    EXPECT_EQ(reduction.args.front().kind, Slot::Kind::Buffer);
    EXPECT_EQ(reduction.args.front().buffer, workspace.buffer) << "the reduction reads the partials";
    EXPECT_EQ(reduction.grid[2], 2) << "one grid.z per matrix";
    EXPECT_NE(reduction.summary.find("the sum of 4 partial products"), std::string::npos) << reduction.summary;
    ++reductions;
  }
  EXPECT_EQ(partials, 5) << "X·Xᵀ of each of the 5 steps";
  EXPECT_EQ(reductions, partials);
  // The reductions (and the partial kernels) through NVRTC: the emulation compiles them as C++.
  const NvrtcOutput compiled = compile_cuda(program.source, kernels::cuda_device_headers(), "sm_90a");
  for (const Launch& launch : program.launches) {
    const auto found = compiled.resources.find(launch.kernel);
    ASSERT_NE(found, compiled.resources.end()) << launch.kernel;
    EXPECT_EQ(found->second.spill_store_bytes + found->second.spill_load_bytes + found->second.stack_bytes, 0) << launch.kernel << "\n" << compiled.log;
  }
  // The triangular f32 partials are where ptxas once serialized the wgmma pipeline (the epilogue's
  // float-to-bits cast became a use of the accumulators between mma_async and wait).
  EXPECT_EQ(wgmma_serialization_messages(compiled), "") << "ptxas serialized the wgmma pipeline";
  // 3 splits of K = 256 (4 K tiles of 64: 2, 2 and nothing) are refused, naming the product.
  CodegenOptions bad;
  for (const ir::Node& node : function.nodes)
    if (node.kind == ir::OpKind::Gemm) bad.gemm_tiles.push_back(sm90a_tile(3));
  try {
    (void)generate_cuda(function, bad);
    ADD_FAILURE() << "3 splits of K = 256 were accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("3 splits of K = 256 (4 K tiles of 64) would leave a split without K tiles"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(split_k_valid(1000, 4));
  EXPECT_TRUE(split_k_valid(256, 2));
  EXPECT_FALSE(split_k_valid(256, 3));
  EXPECT_FALSE(split_k_valid(64, 2));
  EXPECT_FALSE(split_k_valid(4096, kMaxSplits + 1));
  EXPECT_EQ(sm90a_tile(3).label(), "sm90a/k3");
  EXPECT_NE(sm90a_tile(0).invalid_reason(), "");
  EXPECT_EQ(CudaVariant::parse("generated per-product sm90a/k2,-").label(), "generated per-product sm90a/k2,-");
}

// The 128x256 tile (sm90a_wide_tile) as a per-product choice: B·X of a standard step runs on it
// (one launch per product, persistent over batch x 128-row x 256-column tiles, 3 stages of 48 KiB
// beside the 64 KiB epilogue tile, B's box 256 rows when K-major), compiles for sm_90a without
// spills into HGMMA.64x256x16; the products it cannot run (X·Xᵀ and A·A, triangular) are
// refused with the reason; the label round-trips and split-K is not a wide-tile option.
TEST(HopperCodegen, TheWideTileRunsDenseProductsAndRefusesTriangularOnes) {
  const ir::Function function = schedule("jordan_ns5", 256, 1000, 2, ir::StrategyKind::Standard, ScalarType::BF16);
  CodegenOptions options;
  for (const ir::Node& node : function.nodes)
    if (node.kind == ir::OpKind::Gemm) options.gemm_tiles.push_back(node.symmetric ? std::optional<TileConfig>() : std::optional<TileConfig>(sm90a_wide_tile()));
  const CudaProgram program = generate_cuda(function, options);
  int wide = 0;
  for (const Launch& launch : program.launches) {
    if (!launch.hopper_tile()) continue;
    SCOPED_TRACE(launch.summary);
    ++wide;
    EXPECT_EQ(launch.tile.label(), "sm90a/n256");
    EXPECT_FALSE(launch.triangular);
    EXPECT_NE(launch.summary.find("128x256x64"), std::string::npos);
    // 2 matrices x 2 tile rows x 4 tile columns (1000 / 256, rounded up).
    EXPECT_NE(launch.summary.find("persistent over 16 work items"), std::string::npos);
    EXPECT_EQ(launch.dynamic_shared_bytes, static_cast<int>(oj::hopper::dynamic_shared_bytes(2, false, oj::hopper::kWideTileN)));
    EXPECT_GT(launch.dynamic_shared_bytes, 200 * 1024);
  }
  EXPECT_EQ(wide, 5) << "B·X of each of the 5 steps";
  const NvrtcOutput compiled = compile_cuda(program.source, kernels::cuda_device_headers(), "sm_90a");
  for (const Launch& launch : program.launches) {
    const auto found = compiled.resources.find(launch.kernel);
    ASSERT_NE(found, compiled.resources.end()) << launch.kernel;
    EXPECT_EQ(found->second.spill_store_bytes + found->second.spill_load_bytes + found->second.stack_bytes, 0) << launch.kernel << "\n" << compiled.log;
  }
  EXPECT_EQ(wgmma_serialization_messages(compiled), "") << "ptxas serialized the wgmma pipeline";
  std::string looked;
  const std::string folder = binutils(looked);
  if (!folder.empty()) {
    const auto sass = sass_by_function(folder, compiled);
    for (const Launch& launch : program.launches)
      if (launch.hopper_tile()) {
        ASSERT_NE(sass.find(launch.kernel), sass.end()) << launch.kernel;
        const std::string& code = sass.at(launch.kernel);
        EXPECT_NE(code.find("HGMMA.64x256x16.F32.BF16"), std::string::npos) << launch.kernel;
        EXPECT_EQ(code.find("LDL"), std::string::npos) << launch.kernel << ": local memory";
        EXPECT_EQ(code.find("STL"), std::string::npos) << launch.kernel << ": local memory";
      }
  }
  // Every product on the wide tile: X·Xᵀ (the first) is triangular and refused, saying why.
  CodegenOptions all_wide;
  for (const ir::Node& node : function.nodes)
    if (node.kind == ir::OpKind::Gemm) all_wide.gemm_tiles.push_back(sm90a_wide_tile());
  try {
    (void)generate_cuda(function, all_wide);
    ADD_FAILURE() << "a triangular product ran on the 128x256 tile";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("a triangular product on the 128x256 tile"), std::string::npos) << error.what();
  }
  EXPECT_EQ(sm90a_wide_tile().label(), "sm90a/n256");
  EXPECT_EQ(sm90a_wide_tile().invalid_reason(), "");
  TileConfig split_wide = sm90a_wide_tile();
  split_wide.splits = 2;
  EXPECT_NE(split_wide.invalid_reason(), "");
  EXPECT_EQ(CudaVariant::parse("generated per-product -,-,sm90a/n256").label(), "generated per-product -,-,sm90a/n256");
}

TEST(HopperCodegen, VariantLabelsRoundTrip) {
  for (const char* label : {"generated hopper", "generated hopper 64x64x32/2x2", "generated hopper per-product -,128x128x32/2x4"}) {
    const CudaVariant variant = CudaVariant::parse(label);
    EXPECT_TRUE(variant.hopper) << label;
    EXPECT_EQ(variant.label(), label);
  }
  EXPECT_FALSE(CudaVariant::parse("generated").hopper);
  EXPECT_THROW(CudaVariant::parse("generated hopperx"), std::invalid_argument);
  const ir::Function function = schedule("jordan_ns5", 512, 1024, 1, ir::StrategyKind::Standard, ScalarType::BF16);
  EXPECT_TRUE(generate_variant(function, CudaVariant::parse("generated hopper")).needs_sm90a());
  EXPECT_FALSE(generate_variant(function, CudaVariant::parse("generated")).needs_sm90a());
}

}  // namespace
}  // namespace orthojit::cuda
