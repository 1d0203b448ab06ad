// The fused small-matrix kernel without a GPU: which programs are eligible (and why not), the one
// launch it makes, where the buffers live, and that the generated kernel compiles with NVRTC for
// sm_80 and sm_90 with no spills and registers that fit the CTA. (Its numbers against the f64
// reference interpreter are checked by the GPU tests.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <tuple>

#include "cuda/cuda_codegen.h"
#include "cuda/fused_small_codegen.h"
#include "cuda/nvrtc_compiler.h"
#include "dsl/parser.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"
#include "emulated_device_headers.h"
#include "test_support.h"

namespace orthojit::cuda {
namespace {

ir::Function schedule(const std::string& program_name, int64_t rows, int64_t cols, int64_t batch, const char* strategy,
                      std::optional<ScalarType> precision = std::nullopt) {
  return testing::compile(kernels::load_program_by_name_or_path(program_name), rows, cols,
                          std::string(strategy) == "gram" ? ir::StrategyKind::Gram : ir::StrategyKind::Standard, precision, batch);
}

size_t count(const std::string& text, const std::string& what) {
  size_t found = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++found;
  return found;
}

void expect_one_launch(const CudaProgram& program, const ir::Function& function, const FusedSmallOptions& options = {}) {
  ASSERT_EQ(program.launches.size(), 1u);
  const Launch& launch = program.launches[0];
  EXPECT_EQ(launch.kernel, "fused_" + function.name);
  EXPECT_EQ(launch.grid[0], function.batch);  // one CTA per matrix
  EXPECT_EQ(launch.grid[1], 1);
  EXPECT_EQ(launch.grid[2], 1);
  EXPECT_EQ(launch.block, options.threads);
  EXPECT_GT(launch.dynamic_shared_bytes, 0);
  EXPECT_LE(launch.dynamic_shared_bytes, options.shared_memory_limit);
  ASSERT_GE(launch.args.size(), 2u);
  EXPECT_EQ(launch.args[0].kind, Slot::Kind::Input);
  EXPECT_EQ(launch.args[1].kind, Slot::Kind::Output);
  for (size_t k = 2; k < launch.args.size(); ++k) EXPECT_EQ(launch.args[k].kind, Slot::Kind::Buffer);
  EXPECT_EQ(program.batch, function.batch);
  EXPECT_EQ(program.input_elements, function.input_shape.elements());
  EXPECT_EQ(program.output_elements, function.input_shape.elements());
  EXPECT_EQ(program.buffer_bytes.size(), function.buffers.size());
  // Every product of the schedule is one cta_product phase.
  size_t products = 0;
  for (const auto& node : function.nodes) products += node.kind == ir::OpKind::Gemm;
  EXPECT_EQ(count(program.source, "oj::cta_product<"), products);
}

void expect_clean_resources(const NvrtcOutput& output, const Launch& launch) {
  ASSERT_EQ(output.resources.size(), 1u) << output.log;
  const auto found = output.resources.find(launch.kernel);
  ASSERT_NE(found, output.resources.end()) << "no ptxas report for " << launch.kernel << "\n" << output.log;
  const KernelResources& resources = found->second;
  SCOPED_TRACE(launch.summary + " on " + output.arch);
  EXPECT_EQ(resources.spill_store_bytes, 0) << "spills\n" << output.log;
  EXPECT_EQ(resources.spill_load_bytes, 0) << "spills\n" << output.log;
  EXPECT_GT(resources.registers, 0);
  EXPECT_LE(resources.registers * launch.block, 65536);
  EXPECT_EQ(resources.shared_bytes, 0) << "all shared memory is dynamic";
}

// The cross-section the issue names: three programs, two 16-bit types, both strategies, a square-ish
// 128-row, a wide 128-row, a ragged (tall, so oriented) and a tiny shape.
using Case = std::tuple<const char*, ScalarType, const char*, int64_t, int64_t, int64_t>;
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* program : {"jordan_ns5", "polar_express5", "gram_polar_express5"})
    for (ScalarType type : {ScalarType::BF16, ScalarType::F16})
      for (const char* strategy : {"standard", "gram"})
        for (const auto& [rows, cols, batch] : {std::tuple<int64_t, int64_t, int64_t>{64, 256, 3}, {128, 2048, 2}, {300, 100, 1}, {16, 64, 1}})
          cases.emplace_back(program, type, strategy, rows, cols, batch);
  return cases;
}

std::string describe(const Case& c) {
  const auto& [program, type, strategy, rows, cols, batch] = c;
  return std::string(program) + " " + std::string(to_string(type)) + " " + strategy + " " + std::to_string(rows) + "x" + std::to_string(cols) + "x" +
         std::to_string(batch);
}

TEST(CudaFusedSmall, ShippedProgramsAreEligibleAndMakeOneLaunch) {
  for (const Case& c : all_cases()) {
    const auto& [program, type, strategy, rows, cols, batch] = c;
    SCOPED_TRACE(describe(c));
    const ir::Function function = schedule(program, rows, cols, batch, strategy, type);
    EXPECT_EQ(fused_small_ineligible_reason(function), "");
    expect_one_launch(generate_fused_small_cuda(function), function);
  }
}

// NVRTC takes about two seconds per compile here, so this is a cross-section rather than all 48
// cases on both archs: each (program, type, strategy) on sm_90 with the shapes taking turns (every
// shape three times), and each shape once on sm_80 too.
TEST(CudaFusedSmall, CompilesForSm80AndSm90WithoutSpills) {
  const std::vector<Case> cases = all_cases();
  constexpr size_t kShapes = 4;  // all_cases: the shape varies fastest
  for (size_t combination = 0; combination < cases.size() / kShapes; ++combination) {
    const size_t shape = combination % kShapes;
    const Case& c = cases[combination * kShapes + shape];
    const auto& [program, type, strategy, rows, cols, batch] = c;
    SCOPED_TRACE(describe(c));
    const ir::Function function = schedule(program, rows, cols, batch, strategy, type);
    const CudaProgram generated = generate_fused_small_cuda(function);
    std::vector<const char*> archs = {"sm_90"};
    if (combination < kShapes) archs.push_back("sm_80");
    for (const char* arch : archs) {
      const NvrtcOutput output = compile_cuda(generated.source, kernels::cuda_device_headers(), arch);
      EXPECT_FALSE(output.image.empty());
      expect_clean_resources(output, generated.launches[0]);
    }
  }
}

TEST(CudaFusedSmall, SquareBuffersLiveInSharedMemoryAndTheIterateWhenItFits) {
  {
    // 64x256: everything fits (X 64x264 padded 16-bit = 33 KiB twice, A and B 9 KiB each):
    // no buffer argument at all.
    const ir::Function function = schedule("jordan_ns5", 64, 256, 3, "standard", ScalarType::BF16);
    const CudaProgram program = generate_fused_small_cuda(function);
    EXPECT_EQ(program.launches[0].args.size(), 2u) << program.launches[0].summary;
  }
  {
    // 128x2048: X is 512 KiB per matrix, so its two ping-pong buffers stay global; A and B
    // (128x128) are in shared memory.
    const ir::Function function = schedule("jordan_ns5", 128, 2048, 2, "standard", ScalarType::BF16);
    const CudaProgram program = generate_fused_small_cuda(function);
    const Launch& launch = program.launches[0];
    std::vector<int> global;
    for (size_t k = 2; k < launch.args.size(); ++k) global.push_back(launch.args[k].buffer);
    for (int b : global) EXPECT_GT(function.buffers[static_cast<size_t>(b)].elements, 128 * 128) << "buf" << b << " should be in shared memory";
    EXPECT_EQ(global.size(), 2u) << launch.summary;
    // Scratch (256 threads x 8 bytes) plus two 128 x 136 padded bf16 matrices.
    EXPECT_EQ(launch.dynamic_shared_bytes, 256 * 8 + 2 * 128 * 136 * 2);
  }
}

TEST(CudaFusedSmall, TriangularProductsComputeUpperTilesAndMirror) {
  const ir::Function function = schedule("jordan_ns5", 128, 512, 1, "standard", ScalarType::BF16);
  const CudaProgram program = generate_fused_small_cuda(function);
  // Per step: X·Xᵀ and c·A·A + b·A are symmetric (upper tiles, mirrored store); B·X + a·X is not.
  EXPECT_EQ(count(program.source, "upper tiles + mirror"), 10u);
  EXPECT_EQ(count(program.source, "if (i != j) "), 10u);
  passes::CompileOptions dense;
  dense.rows = 128;
  dense.cols = 512;
  dense.triangular_products = false;
  const ir::Function full = passes::compile_program(kernels::load_program_by_name_or_path("jordan_ns5"), dense);
  EXPECT_EQ(count(generate_fused_small_cuda(full).source, "upper tiles + mirror"), 0u);
}

TEST(CudaFusedSmall, IneligibleProgramsSayWhy) {
  auto expect_reason = [](const ir::Function& function, const std::string& fragment) {
    const std::string reason = fused_small_ineligible_reason(function);
    EXPECT_NE(reason.find(fragment), std::string::npos) << reason;
    try {
      generate_fused_small_cuda(function);
      ADD_FAILURE() << "expected std::invalid_argument for: " << reason;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(reason), std::string::npos) << error.what();
    }
  };
  // 129 rows, wide or (oriented) tall.
  expect_reason(schedule("jordan_ns5", 129, 512, 1, "standard", ScalarType::BF16), "129 rows");
  expect_reason(schedule("polar_express5", 2048, 129, 1, "gram", ScalarType::F16), "129 rows");
  // 32-bit storage: the products take 16-bit operands.
  expect_reason(schedule("jordan_ns5_f32", 64, 128, 1, "standard"), "16-bit operands");
  expect_reason(schedule("jordan_ns5", 64, 128, 1, "standard", ScalarType::F32), "16-bit operands");
  // A budget too small for the m x m buffers.
  FusedSmallOptions tight;
  tight.shared_memory_limit = 48 * 1024;
  const std::string reason = fused_small_ineligible_reason(schedule("jordan_ns5", 128, 512, 1, "standard", ScalarType::BF16), tight);
  EXPECT_NE(reason.find("more than the 48.0 KiB budget"), std::string::npos) << reason;
  // Launch shapes the kernel cannot take.
  FusedSmallOptions odd_threads;
  odd_threads.threads = 96;
  EXPECT_NE(fused_small_ineligible_reason(schedule("jordan_ns5", 64, 128, 1, "standard", ScalarType::BF16), odd_threads).find("power of two"),
            std::string::npos);
}

// The rest of the op set: an f64 norm with the clamp mode, and a lincomb (the expanded statement
// form keeps a · X + b · AX + c · A·AX as a three-term lincomb after the products).
TEST(CudaFusedSmall, F64NormClampAndLinCombCompile) {
  const std::string text =
      "orthogonalizer expanded {\n  precision { storage = f16; accumulate = f32; norm = f64; }\n"
      "  normalize frobenius(safety = 1.01, eps = 1e-7, mode = clamp);\n  coefficients jordan repeat 2;\n"
      "  step {\n    A = X @ X.T;\n    AX = A @ X;\n    X = a * X + b * AX + c * A @ AX;\n  }\n}\n";
  passes::CompileOptions options;
  options.rows = 200;  // tall: oriented, the norm reads the input through a transposed view
  options.cols = 72;
  options.batch = 2;
  const ir::Function function = passes::compile_program(dsl::parse_program(text), options);
  ASSERT_EQ(fused_small_ineligible_reason(function), "");
  const CudaProgram program = generate_fused_small_cuda(function);
  expect_one_launch(program, function);
  EXPECT_NE(program.source.find("double sum = 0;"), std::string::npos);
  EXPECT_NE(program.source.find("(norm > eps ? norm : eps)"), std::string::npos);
  EXPECT_NE(program.source.find("// lincomb "), std::string::npos);
  const NvrtcOutput output = compile_cuda(program.source, kernels::cuda_device_headers(), "sm_80");
  expect_clean_resources(output, program.launches[0]);
}

TEST(CudaFusedSmall, OptionsChangeThreadsTileAndBudget) {
  const ir::Function function = schedule("gram_polar_express5", 128, 1024, 4, "gram", ScalarType::BF16);
  FusedSmallOptions options;
  options.threads = 512;
  options.warp_tile = 16;
  options.shared_memory_limit = 227 * 1024;  // H100/H200
  const CudaProgram program = generate_fused_small_cuda(function, options);
  expect_one_launch(program, function, options);
  EXPECT_NE(program.source.find(", 16, THREADS / 32,"), std::string::npos);
  const NvrtcOutput output = compile_cuda(program.source, kernels::cuda_device_headers(), "sm_90");
  expect_clean_resources(output, program.launches[0]);
}

// Runs the generated kernel on the host: the generated source, the fused part of the real device
// header and the emulation of the rest, compiled with the host's `c++`, one std::thread per CUDA
// thread. Output, shared memory and global buffers start poisoned, so an element no phase wrote
// shows up. Returns the outputs (batch x output elements), or nothing when no `c++` is at hand.
std::optional<std::vector<double>> run_on_host_emulation(const CudaProgram& program, const ir::Function& function, const std::vector<float>& input,
                                                         const std::string& case_name) {
  if (std::system("command -v c++ > /dev/null 2>&1") != 0) return std::nullopt;
  const std::filesystem::path directory = std::filesystem::path(::testing::TempDir()) / ("orthojit_fused_emulation_" + case_name);
  std::filesystem::create_directories(directory);
  emulation::write_emulated_device_headers(directory, true);
  std::ofstream(directory / "kernel.cu") << program.source;
  const Launch& launch = program.launches[0];
  std::ostringstream driver;
  driver << "#include <cstdio>\n#include <thread>\n#include <vector>\n#include \"kernel.cu\"\nint main() {\n"
         << "  std::vector<float> input(" << input.size() << "), output(" << program.batch * program.output_elements << ", -777.0f);\n"
         << "  std::FILE* in = std::fopen(\"input.bin\", \"rb\");\n  if (std::fread(input.data(), 4, input.size(), in) != input.size()) return 1;\n";
  std::string call = "input.data(), output.data()";
  for (size_t k = 2; k < launch.args.size(); ++k) {
    const auto b = static_cast<size_t>(launch.args[k].buffer);
    driver << "  std::vector<unsigned char> global" << b << "(" << program.buffer_bytes[b] << ", 0xff);  // NaN bits in bf16/f16/f32\n";
    call += ", reinterpret_cast<" + std::string(function.buffers[b].type == ScalarType::F32 ? "float" : "oj::u16") + "*>(global" + std::to_string(b) + ".data())";
  }
  // One CTA per matrix (grid.x), shared memory poisoned before each (oj_emu::run_grid).
  driver << "  const unsigned grid[3] = {" << launch.grid[0] << ", " << launch.grid[1] << ", " << launch.grid[2] << "};\n"
         << "  oj_emu::run_grid(grid, " << launch.block << ", [&] { " << launch.kernel << "(" << call << "); });\n"
         << "  std::FILE* out = std::fopen(\"output.bin\", \"wb\");\n  std::fwrite(output.data(), 4, output.size(), out);\n  std::fclose(out);\n}\n";
  std::ofstream(directory / "driver.cpp") << driver.str();
  std::ofstream(directory / "input.bin", std::ios::binary).write(reinterpret_cast<const char*>(input.data()), static_cast<std::streamsize>(input.size() * 4));
  const std::string quoted = "'" + directory.string() + "'";
  const std::string build = "cd " + quoted + " && c++ -std=c++20 -O1 -w -pthread -I. -o driver driver.cpp > build.log 2>&1 && ./driver";
  const int status = std::system(build.c_str());
  EXPECT_EQ(status, 0) << "see " << directory / "build.log";
  std::vector<float> output(static_cast<size_t>(program.batch * program.output_elements), -777.0f);
  std::ifstream(directory / "output.bin", std::ios::binary).read(reinterpret_cast<char*>(output.data()), static_cast<std::streamsize>(output.size() * 4));
  if (status == 0) std::filesystem::remove_all(directory);  // kept when the build or run failed, to look at
  return std::vector<double>(output.begin(), output.end());
}

// The kernel's numbers: every element written, and within a few units in the last place of the
// storage type (f32 accumulation in MMA order against the interpreter's f64 sums) of the reference.
// An index slip in a tile loop or a view is an error of the order of the values themselves.
TEST(CudaFusedSmall, HostEmulationMatchesTheReferenceInterpreter) {
  struct Emulated {
    const char* program;
    ScalarType type;
    const char* strategy;
    int64_t rows, cols, batch;
    int threads, shared_memory_limit;
  };
  const Emulated cases[] = {
      {"jordan_ns5", ScalarType::BF16, "standard", 16, 64, 2, 64, 163 * 1024},        // everything in shared memory, 16x16 tiles
      {"jordan_ns5", ScalarType::BF16, "gram", 101, 37, 1, 128, 163 * 1024},          // tall (oriented), ragged, odd k, 32x32 tiles
      {"polar_express5", ScalarType::F16, "standard", 72, 250, 1, 128, 40 * 1024},    // X in global memory, ragged
      {"gram_polar_express5", ScalarType::F16, "gram", 48, 160, 2, 64, 163 * 1024},  // restarts, Q through the m x m chain
  };
  for (const Emulated& c : cases) {
    const std::string name = std::string(c.program) + "_" + std::string(to_string(c.type)) + "_" + c.strategy + "_" + std::to_string(c.rows) + "x" +
                             std::to_string(c.cols);
    SCOPED_TRACE(name);
    const ir::Function function = schedule(c.program, c.rows, c.cols, c.batch, c.strategy, c.type);
    FusedSmallOptions options;
    options.threads = c.threads;
    options.shared_memory_limit = c.shared_memory_limit;
    const CudaProgram program = generate_fused_small_cuda(function, options);
    std::mt19937 generator(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> input(static_cast<size_t>(c.batch * c.rows * c.cols));
    for (float& value : input) value = normal(generator);
    const auto output = run_on_host_emulation(program, function, input, name);
    if (!output) GTEST_SKIP() << "no host c++ compiler to run the emulation";
    const std::vector<double> expected = reference::interpret(function, std::vector<double>(input.begin(), input.end()));
    ASSERT_EQ(output->size(), expected.size());
    double largest = 0, worst = 0;
    for (size_t e = 0; e < expected.size(); ++e) {
      ASSERT_TRUE(std::isfinite((*output)[e]) && (*output)[e] != -777.0) << "element " << e << " not written: " << (*output)[e];
      largest = std::max(largest, std::abs(expected[e]));
      worst = std::max(worst, std::abs((*output)[e] - expected[e]));
    }
    const double unit = c.type == ScalarType::BF16 ? 0x1p-8 : 0x1p-11;
    EXPECT_LE(worst, 8 * unit * largest) << "largest |reference| " << largest;
  }
}

}  // namespace
}  // namespace orthojit::cuda
