// The CUDA backend without a GPU: every generated kernel of the search space compiles with NVRTC
// for sm_80 and sm_90, and ptxas's report shows no spills, registers within the launch bounds'
// budget and shared memory within the static limit. Plus the host-side launch math.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "cuda/baseline_kernels.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_codegen.h"
#include "cuda/nvrtc_compiler.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "dsl/parser.h"
#include "passes/pipeline.h"
#include "test_support.h"
#include <tuple>

namespace orthojit::cuda {
namespace {

ir::Function schedule(const std::string& program_name, int64_t rows, int64_t cols, int64_t batch, const char* strategy,
                      std::optional<ScalarType> precision = std::nullopt) {
  return testing::compile(kernels::load_program_by_name_or_path(program_name), rows, cols,
                          std::string(strategy) == "gram" ? ir::StrategyKind::Gram : ir::StrategyKind::Standard, precision, batch);
}

void expect_clean_resources(const NvrtcOutput& output, const CudaProgram& program) {
  std::set<std::string> kernels;
  for (const auto& launch : program.launches) kernels.insert(launch.kernel);
  EXPECT_EQ(output.resources.size(), kernels.size()) << output.log;
  for (const auto& launch : program.launches) {
    auto found = output.resources.find(launch.kernel);
    ASSERT_NE(found, output.resources.end()) << "no ptxas report for " << launch.kernel << "\n" << output.log;
    const KernelResources& resources = found->second;
    SCOPED_TRACE(launch.summary + " on " + output.arch);
    EXPECT_EQ(resources.spill_store_bytes, 0) << "spills";
    EXPECT_EQ(resources.spill_load_bytes, 0) << "spills";
    EXPECT_GT(resources.registers, 0);
    // __launch_bounds__(threads): 65536 registers per SM shared by at least one CTA.
    EXPECT_LE(resources.registers * launch.block, 65536);
    EXPECT_LE(resources.registers, 255);
    EXPECT_LE(resources.shared_bytes, 48 * 1024);
  }
}

// One step of every kind of product the schedules contain: X·Xᵀ (triangular, a k-contiguous B),
// c·A·A + b·A (triangular, row-major B, a C operand), B·X + a·X (dense, row-major B).
ir::Function one_step(const char* storage, int64_t rows, int64_t cols, int64_t batch) {
  const std::string text = std::string("orthogonalizer one_step {\n  precision { storage = ") + storage +
                           "; accumulate = f32; norm = f32; }\n  normalize frobenius(safety = 1.0, eps = 1e-7);\n"
                           "  coefficients jordan repeat 1;\n  step {\n    A = X @ X.T;\n    B = b * A + c * A @ A;\n    X = a * X + B @ X;\n  }\n}\n";
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  return passes::compile_program(dsl::parse_program(text), options);
}

TEST(CudaCodegen, EveryTileConfigCompilesForSm80AndSm90WithoutSpills) {
  const ir::Function function = one_step("bf16", 300, 1000, 2);
  for (const TileConfig& tile : tile_configs()) {
    ASSERT_EQ(tile.invalid_reason(), "") << tile.label();
    CodegenOptions options;
    options.gemm_tiles.assign(16, tile);
    const CudaProgram program = generate_cuda(function, options);
    for (const char* arch : {"sm_80", "sm_90"}) {
      SCOPED_TRACE(tile.label() + " " + arch);
      const NvrtcOutput output = compile_cuda(program.source, kernels::cuda_device_headers(), arch);
      EXPECT_FALSE(output.image.empty());
      expect_clean_resources(output, program);
    }
  }
}

// The 48 KiB bound on a tile's shared memory counts the layout an m- or n-contiguous operand is
// stored in ([BK][rows + 8], larger than [rows][BK + 8] when BK > rows): 32x32x320 fits the
// k-contiguous count (41 KiB) but not the transposed one (50 KiB) and is refused (ptxas reported
// 52-57 KiB for such tiles, a failed compile, before the bound counted it).
TEST(CudaCodegen, TheSharedMemoryBoundCountsTransposedOperandLayouts) {
  EXPECT_NE((TileConfig{32, 32, 320, 1, 1}).invalid_reason().find("48 KiB"), std::string::npos);
  EXPECT_NE((TileConfig{32, 32, 368, 1, 1}).invalid_reason().find("48 KiB"), std::string::npos);
  EXPECT_EQ((TileConfig{32, 32, 288, 1, 1}).invalid_reason(), "");  // 45 KiB either way
}

// Xᵀ·X: an m-contiguous left operand, stored as loaded and read by ldmatrix.x4.trans; 16-byte
// chunks (cp.async) and ragged pairs (register-staged), every tile, sm_80 and sm_90.
TEST(CudaCodegen, TransposedLeftOperandsCompileWithoutSpills) {
  const std::string text =
      "orthogonalizer transposed_left {\n  precision { storage = bf16; accumulate = f32; norm = f32; }\n"
      "  normalize frobenius(safety = 1.0, eps = 1e-7);\n  coefficients jordan repeat 1;\n"
      "  step {\n    A = X.T @ X;\n    X = a * X + b * X @ A;\n  }\n}\n";
  for (const int64_t cols : {512, 510}) {
    passes::CompileOptions compile;
    compile.rows = 200;
    compile.cols = cols;
    const ir::Function function = passes::compile_program(dsl::parse_program(text), compile);
    for (const TileConfig& tile : tile_configs()) {
      CodegenOptions options;
      options.gemm_tiles.assign(16, tile);
      const CudaProgram program = generate_cuda(function, options);
      ASSERT_NE(program.source.find("A_K_CONTIGUOUS = false"), std::string::npos);  // A read by ldmatrix.x4.trans
      for (const char* arch : {"sm_80", "sm_90"}) {
        SCOPED_TRACE(tile.label() + " " + arch + " cols " + std::to_string(cols));
        expect_clean_resources(compile_cuda(program.source, kernels::cuda_device_headers(), arch), program);
      }
    }
  }
}

TEST(CudaCodegen, ShippedProgramsAndStrategiesCompile) {
  // bf16 and f16 products, both strategies (gram's restarts and m x m chains), per-step coefficients,
  // a tall input (oriented: transposed views everywhere), odd sizes. NVRTC takes a second or more
  // per program, so this is a cross-section rather than the full product of all of them.
  const std::tuple<const char*, const char*, int64_t, int64_t> cases[] = {
      {"jordan_ns5", "standard", 96, 384}, {"jordan_ns5", "gram", 130, 517}, {"polar_express5", "standard", 300, 64}, {"gram_polar_express5", "gram", 64, 256}};
  for (const auto& [name, strategy, rows, cols] : cases) {
    {
      const ir::Function function = schedule(name, rows, cols, 3, strategy);
      const CudaProgram program = generate_cuda(function);
      SCOPED_TRACE(std::string(name) + " " + strategy);
      const NvrtcOutput output = compile_cuda(program.source, kernels::cuda_device_headers(), "sm_90");
      expect_clean_resources(output, program);
    }
  }
}

// The epilogue α·acc + β·C + γ·I rounds each operation on its own on the device too: NVRTC
// (--fmad=true) would contract `v += β * c` into an FMA, which the host emulation and the CPU
// backend do not, so the device's bits would not be the ones the emulation tests check. In PTX
// the product kernels have no f32 FMA at all (their sums are MMAs); one in a kernel with C is the
// contracted epilogue.
TEST(CudaCodegen, ProductEpiloguesAreNotContractedIntoFmas) {
  const ir::Function function = schedule("jordan_ns5", 256, 512, 1, "standard");
  const CudaProgram program = generate_cuda(function);
  const NvrtcOutput output = compile_cuda(program.source, kernels::cuda_device_headers(), "compute_80");
  const std::string ptx(output.image.begin(), output.image.end());
  int with_c = 0;
  for (const Launch& launch : program.launches) {
    if (launch.kernel.rfind("gemm_", 0) != 0) continue;
    const size_t description = program.source.find("struct " + launch.kernel + "_product {");
    ASSERT_NE(description, std::string::npos) << launch.kernel;
    if (program.source.find("HAS_C = true", description) > program.source.find("};", description)) continue;
    ++with_c;
    const size_t begin = ptx.find(".entry " + launch.kernel + "(");
    ASSERT_NE(begin, std::string::npos) << launch.kernel;
    const std::string body = ptx.substr(begin, ptx.find("\n}\n", begin) - begin);
    EXPECT_EQ(body.find("fma.rn.f32"), std::string::npos) << launch.summary << ": an f32 FMA (the epilogue contracted)";
    EXPECT_NE(body.find("mul.rn.f32"), std::string::npos) << launch.summary << ": no separately rounded multiply";
  }
  EXPECT_GT(with_c, 0) << "no product with C in the standard step (B·X + a·X)";
}

// The same for every generated f32/f64 sum a kernel writes: the fused small-matrix kernel (its
// epilogues, lincombs and the normalize's sum of squares), the per-op lincombs and norm partial
// sums of a gram schedule, f32 and f64 norms. The one FMA allowed is the triangular tile index's
// 8·index + 1 (an exact integer in f32, corrected after).
TEST(CudaCodegen, NoGeneratedSumIsContractedIntoAnFma) {
  struct Case {
    const char* program;
    const char* strategy;
    int64_t rows, cols;
    CudaVariant::Kind kind;
  };
  int kernels_seen = 0;
  for (const Case& c : {Case{"jordan_ns5", "standard", 128, 512, CudaVariant::Kind::FusedSmall}, Case{"jordan_ns5", "gram", 96, 384, CudaVariant::Kind::FusedSmall},
                        Case{"jordan_ns5", "gram", 256, 1024, CudaVariant::Kind::Generated}, Case{"polar_express5", "standard", 64, 256, CudaVariant::Kind::FusedSmall}}) {
    SCOPED_TRACE(std::string(c.program) + " " + c.strategy + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols));
    CudaVariant variant;
    variant.kind = c.kind;
    const CudaProgram program = generate_variant(schedule(c.program, c.rows, c.cols, 2, c.strategy), variant);
    const NvrtcOutput output = compile_cuda(program.source, kernels::cuda_device_headers(), "compute_80");
    const std::string ptx(output.image.begin(), output.image.end());
    size_t at = 0;
    while ((at = ptx.find(".entry ", at)) != std::string::npos) {
      const size_t end = ptx.find("\n}\n", at);
      const std::string body = ptx.substr(at, end - at), name = body.substr(7, body.find('(') - 7);
      ++kernels_seen;
      std::istringstream lines(body);
      for (std::string line; std::getline(lines, line);)
        if ((line.find("fma.rn.f32") != std::string::npos || line.find("fma.rn.f64") != std::string::npos) && line.find("0f41000000") == std::string::npos)
          ADD_FAILURE() << name << ": a contracted sum: " << line;
      at = end;
    }
  }
  EXPECT_GE(kernels_seen, 6);
}

// The vendor baselines' own kernels (the scaled norm, the casts) compile for sm_80 and sm_90, each
// kernel reported by ptxas, none spilling, and their sums are not contracted either.
TEST(CudaCodegen, BaselineKernelsCompileWithoutSpills) {
  for (const char* arch : {"sm_80", "sm_90"}) {
    const NvrtcOutput output = compile_cuda(baseline_kernel_source(), kernels::cuda_device_headers(), arch, "baseline_kernels.cu");
    for (const char* name : {"baseline_largest", "baseline_sum_squares", "baseline_scale_cast", "baseline_output", "baseline_add_identity"}) {
      const auto found = output.resources.find(name);
      ASSERT_NE(found, output.resources.end()) << name << " on " << arch << "\n" << output.log;
      EXPECT_EQ(found->second.spill_store_bytes + found->second.spill_load_bytes, 0) << name << " on " << arch;
    }
  }
  const NvrtcOutput ptx = compile_cuda(baseline_kernel_source(), kernels::cuda_device_headers(), "compute_80", "baseline_kernels.cu");
  const std::string text(ptx.image.begin(), ptx.image.end());
  EXPECT_EQ(text.find("fma.rn.f32"), std::string::npos) << "a contracted sum in the baseline kernels";
}

TEST(CudaCodegen, TriangularProductsLaunchTheUpperTilesOnly) {
  const ir::Function function = schedule("jordan_ns5", 1000, 3000, 1, "standard");
  const CudaProgram program = generate_cuda(function);
  int triangular = 0;
  for (const auto& launch : program.launches) {
    if (launch.summary.find("triangular") == std::string::npos) continue;
    ++triangular;
    // 1000 rows: 128-row tiles would make T(T+1)/2 = 36 work items (T = 8) for 132 SMs, so the
    // default is the 64-row tile: T = 16, 136 upper tiles instead of 256, all of them work items of
    // the persistent loop, and 136 CTAs on an H100 (fewer than the 132 x 4 that fit at once).
    EXPECT_EQ(launch.grid[0], 136) << launch.summary;
    EXPECT_TRUE(launch.persistent);
    EXPECT_EQ(launch.ctas(132, 4), 136);
    EXPECT_EQ(launch.ctas(132, 1), 132);
    EXPECT_EQ(launch.grid[1], 1);
    EXPECT_EQ(launch.grid[2], 1);  // the batch is part of the work items
    EXPECT_NE(launch.summary.find("persistent"), std::string::npos) << launch.summary;
    EXPECT_NE(launch.summary.find("tile 64x64x32/2x2"), std::string::npos) << launch.summary;
  }
  EXPECT_EQ(triangular, 10);  // X·Xᵀ and c·A·A + b·A in each of the 5 steps
}

TEST(CudaCodegen, DefaultTilesFillTheMultiprocessors) {
  // Large tiles where their CTAs fill the GPU, small ones where they would leave SMs idle.
  EXPECT_EQ(default_tile_config(4096, 4096, true).label(), "128x128x32/2x4");   // 528 upper tiles
  EXPECT_EQ(default_tile_config(1024, 1024, true).label(), "64x64x32/2x2");     // 36 of 128: too few
  EXPECT_EQ(default_tile_config(1024, 4096, false).label(), "128x128x32/2x4");  // 256
  EXPECT_EQ(default_tile_config(1024, 1024, false).label(), "64x64x32/2x2");    // 64 dense of 128
  EXPECT_EQ(default_tile_config(1024, 1024, true, 4).label(), "128x128x32/2x4");  // a batch of 4: 144
  EXPECT_EQ(default_tile_config(1024, 1024, true, 1, 32).label(), "128x128x32/2x4");  // a 32-SM GPU
  EXPECT_EQ(default_tile_config(300, 300, false).label(), "64x64x32/2x2");      // small
  // The generator passes the product's facts: a 4096-row X·Xᵀ keeps the large tile.
  // Its 528 upper tiles are the persistent loop's work items, taken by one wave of CTAs: as many
  // as the driver's occupancy calculator says fit (ptxas gives this tile ~210 registers per
  // thread: one 256-thread CTA per SM, 132 CTAs; two with 128 registers, 264).
  const CudaProgram program = generate_cuda(schedule("jordan_ns5", 4096, 8192, 1, "standard"));
  int triangular = 0;
  for (const auto& launch : program.launches) {
    if (launch.summary.find("triangular") != std::string::npos) {
      ++triangular;
      EXPECT_NE(launch.summary.find("tile 128x128x32/2x4"), std::string::npos) << launch.summary;
      EXPECT_EQ(launch.grid[0], 528) << launch.summary;
      EXPECT_TRUE(launch.persistent);
      EXPECT_EQ(launch.ctas(132, 1), 132);
      EXPECT_EQ(launch.ctas(132, 2), 264);
    }
  }
  EXPECT_GT(triangular, 0);
  EXPECT_NE(program.source.find("UPPER = 528, WORK = 528;"), std::string::npos);
}

TEST(CudaCodegen, ThirtyTwoBitStorageIsRefusedWithAClearMessage) {
  const ir::Function function = schedule("jordan_ns5_f32", 64, 128, 1, "standard");
  try {
    generate_cuda(function);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("16-bit operands"), std::string::npos) << error.what();
  }
}

// Turbo-Muon's AOL normalization has no CUDA kernel: every variant says so, and the generator
// refuses rather than emitting the Frobenius normalization in its place.
TEST(CudaCodegen, AolNormalizationIsRefusedByEveryVariant) {
  const ir::Function function = schedule("turbo_muon4", 64, 128, 1, "standard");
  for (auto kind : {CudaVariant::Kind::Generated, CudaVariant::Kind::FusedSmall, CudaVariant::Kind::Cublas, CudaVariant::Kind::Cublaslt}) {
    CudaVariant variant;
    variant.kind = kind;
    EXPECT_NE(variant_unavailable_reason(function, variant, 48 * 1024).find("normalize aol"), std::string::npos) << variant.label();
  }
  try {
    generate_cuda(function);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("AOL"), std::string::npos) << error.what();
  }
}

TEST(CudaCodegen, CompileErrorsCarryTheLogAndTheNumberedSource) {
  const std::string broken = "extern \"C\" __global__ void k() {\n  int x = ;\n}\n";
  const std::string dump = ::testing::TempDir() + "orthojit_broken.cu";
  ::setenv("ORTHOJIT_DUMP_SOURCE_ON_ERROR", dump.c_str(), 1);
  try {
    compile_cuda(broken, {}, "sm_90");
    FAIL() << "expected a compile error";
  } catch (const CudaCompileError& error) {
    EXPECT_NE(error.log().find("error"), std::string::npos);
    EXPECT_NE(error.numbered_source().find("    2 |   int x = ;"), std::string::npos) << error.numbered_source();
    EXPECT_NE(std::string(error.what()).find(dump), std::string::npos);
  }
  ::unsetenv("ORTHOJIT_DUMP_SOURCE_ON_ERROR");
  std::ifstream written(dump);
  EXPECT_TRUE(written.good());
}

TEST(CudaCodegen, PtxasReportParsing) {
  const std::string log =
      "ptxas info    : Compiling entry function 'gemm_5' for 'sm_90'\n"
      "ptxas info    : Function properties for gemm_5\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 20480 bytes smem, 400 bytes cmem[0]\n";
  const auto report = parse_ptxas_report(log);
  ASSERT_EQ(report.count("gemm_5"), 1u);
  EXPECT_EQ(report.at("gemm_5").registers, 168);
  EXPECT_EQ(report.at("gemm_5").spill_store_bytes, 4);
  EXPECT_EQ(report.at("gemm_5").spill_load_bytes, 12);
  EXPECT_EQ(report.at("gemm_5").shared_bytes, 20480);
  EXPECT_TRUE(report.at("gemm_5").wgmma_serialization.empty());
}

// A runner's description names the kernels that spill (ptxas's report), so a slow tile asked for
// by name says why; a clean compile adds nothing. The spilling case is a real one: 32x32x64 on two
// warps (not in the search space) through the register-staged path that a ragged shape takes
// (ptxas 13.0: 108 B on the products of 299x1001 for sm_90).
TEST(CudaCodegen, SpillingKernelsAreNamedInTheRunnerDescription) {
  NvrtcOutput synthetic;
  synthetic.resources = parse_ptxas_report(
      "ptxas info    : Compiling entry function 'gemm_5' for 'sm_90'\n"
      "ptxas info    : Function properties for gemm_5\n    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 20480 bytes smem, 400 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'gemm_6' for 'sm_90'\n"
      "ptxas info    : Function properties for gemm_6\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 96 registers, used 1 barriers, 20480 bytes smem, 400 bytes cmem[0]\n");
  EXPECT_EQ(spill_note(synthetic), "ptxas: gemm_5 spills 4 B stored, 12 B loaded (local memory in the main loop: a slow tile)");
  synthetic.resources.erase("gemm_5");
  EXPECT_EQ(spill_note(synthetic), "");

  const TileConfig deep{32, 32, 64, 1, 2};
  ASSERT_EQ(deep.invalid_reason(), "");
  CodegenOptions options;
  options.gemm_tiles.assign(16, deep);
  const CudaProgram program = generate_cuda(one_step("bf16", 299, 1001, 1), options);
  const NvrtcOutput output = compile_cuda(program.source, kernels::cuda_device_headers(), "sm_90");
  const std::string note = spill_note(output);
  EXPECT_NE(note.find("gemm_"), std::string::npos) << "no kernel of 32x32x64/1x2 spilled on the ragged shape; ptxas:\n" << output.log;
  for (const auto& [kernel, resources] : output.resources)
    EXPECT_EQ(note.find(kernel + " spills") != std::string::npos, resources.spill_store_bytes + resources.spill_load_bytes > 0) << kernel;
}

// ptxas's wgmma serialization messages (as nvcc 13.0 prints them for a kernel that reads its
// accumulators between mma_async and wait) are kept per kernel; they name the kernel themselves,
// before its entry line or without one. Other C75xx infos and other kernels' lines are not theirs.
TEST(CudaCodegen, PtxasWgmmaSerializationMessagesAreKeptPerKernel) {
  const std::string log =
      "ptxas info    : (C7519) warpgroup.arrive is injected in around line 496 by compiler to allow use of registers in GMMA in function 'tri_f32'\n"
      "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions reading "
      "accumulator registers of  a wgmma between start and end of the pipeline stage in the function 'tri_f32'\n"
      "ptxas info    : Compiling entry function 'tri_f32' for 'sm_90a'\n"
      "ptxas info    : Used 168 registers, used 1 barriers\n"
      "ptxas info    : Compiling entry function 'dense_bf16' for 'sm_90a'\n"
      "ptxas info    : (C7500) some other note in the function 'dense_bf16'\n"
      "ptxas info    : Used 168 registers, used 1 barriers\n";
  const auto report = parse_ptxas_report(log);
  ASSERT_EQ(report.count("tri_f32"), 1u);
  EXPECT_EQ(report.at("tri_f32").registers, 168);
  ASSERT_EQ(report.at("tri_f32").wgmma_serialization.size(), 2u);
  EXPECT_NE(report.at("tri_f32").wgmma_serialization[0].find("C7519"), std::string::npos);
  EXPECT_NE(report.at("tri_f32").wgmma_serialization[1].find("C7514"), std::string::npos);
  ASSERT_EQ(report.count("dense_bf16"), 1u);
  EXPECT_TRUE(report.at("dense_bf16").wgmma_serialization.empty());
}

}  // namespace
}  // namespace orthojit::cuda
