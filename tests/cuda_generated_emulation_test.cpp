// generate_cuda's per-op kernels run on the CPU (tests/cuda_host_emulator.h): the main GPU path's
// index math, tiling, vector loads, triangular scheduling and mirror stores, epilogues
// (α·acc + β·C + γ·I), normalization and batching, against the f64 reference interpreter, for
// every tile configuration of the search space and for ragged, tall and batched shapes. Without a
// host `c++` the tests are skipped. (On a GPU, tests/cuda_device_test.cpp checks the same numbers.)
//
// Besides the output, every launch is checked as it runs: its destination buffer is poisoned
// before it (unless it also reads it) and every element of its value must be written after it;
// a triangular product's value (and a lincomb of them) must be exactly symmetric; the red zones
// around the allocations and the alignment gaps between buffers must stay poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "cuda/cuda_codegen.h"
#include "cuda_host_emulator.h"
#include "dsl/parser.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"

namespace orthojit::cuda {
namespace {

using emulation::HostEmulator;

ir::Function schedule(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, ir::StrategyKind strategy,
                      std::optional<ScalarType> precision = std::nullopt) {
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  options.strategy = strategy;
  options.precision = precision;
  return passes::compile_program(program, options);
}

dsl::Program shipped(const char* name) { return kernels::load_program_by_name_or_path(name); }

// Two Jordan steps, every kind of product the standard schedule makes: X·Xᵀ (triangular, B read
// k-contiguous), c·A·A + b·A (triangular, with C), B·X + a·X (dense, row-major B); the gram
// strategy turns them into m x m chains.
dsl::Program two_steps(const char* storage) {
  return dsl::parse_program(std::string("orthogonalizer two_steps {\n  precision { storage = ") + storage +
                            "; accumulate = f32; norm = f32; }\n  normalize frobenius(safety = 1.0, eps = 1e-7);\n"
                            "  coefficients jordan repeat 2;\n  step {\n    A = X @ X.T;\n    B = b * A + c * A @ A;\n    X = a * X + B @ X;\n  }\n}\n");
}

struct Case {
  std::string name;
  ir::Function function;
  CodegenOptions options;
  CudaProgram program;
};

Case make_case(std::string name, ir::Function function, CodegenOptions options = {}) {
  CudaProgram program = generate_cuda(function, options);
  return {std::move(name), std::move(function), std::move(options), std::move(program)};
}

// Compiles the cases' programs two at a time (each compile is one single-threaded `c++`).
std::vector<std::unique_ptr<HostEmulator>> compile_all(const std::vector<Case>& cases) {
  std::vector<std::unique_ptr<HostEmulator>> emulators(cases.size());
  std::vector<std::string> errors(cases.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t c = next++; c < cases.size(); c = next++) {
      try {
        std::string directory_name = "orthojit_emulation_" + cases[c].name;
        for (char& ch : directory_name)
          if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') ch = '_';
        emulators[c] = std::make_unique<HostEmulator>(cases[c].program, std::filesystem::path(::testing::TempDir()) / directory_name);
      } catch (const std::exception& error) {
        errors[c] = error.what();
      }
    }
  };
  std::thread helper(worker);
  worker();
  helper.join();
  for (size_t c = 0; c < cases.size(); ++c) EXPECT_EQ(errors[c], "") << cases[c].name;
  return emulators;
}

// The node a launch computes: kernels are named "<op>_<node index>[_partial|_scale]".
size_t node_of(const Launch& launch) {
  const size_t begin = launch.kernel.find('_') + 1;
  return static_cast<size_t>(std::stoul(launch.kernel.substr(begin)));
}

bool is_poison(const unsigned char* element, size_t bytes) {
  for (size_t b = 0; b < bytes; ++b)
    if (element[b] != 0xff) return false;
  return true;
}

// Runs one case, checking each launch as it goes, and compares the output with the reference.
void check(const Case& c, HostEmulator& emulator) {
  SCOPED_TRACE(c.name);
  const ir::Function& function = c.function;
  const CudaProgram& program = c.program;
  std::mt19937 generator(20240611);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> input(static_cast<size_t>(program.batch * program.input_elements));
  for (float& value : input) value = normal(generator);

  int symmetric_checked = 0;
  auto before = [&](size_t index) {
    const Launch& launch = program.launches[index];
    const Slot& destination = launch.args.back();
    if (destination.kind != Slot::Kind::Buffer || destination.buffer < 0) return;
    for (size_t k = 0; k + 1 < launch.args.size(); ++k)
      if (launch.args[k].kind == Slot::Kind::Buffer && launch.args[k].buffer == destination.buffer) return;  // reads what it writes
    std::memset(emulator.address(destination), 0xff, static_cast<size_t>(program.buffer_bytes[static_cast<size_t>(destination.buffer)]));
  };
  auto after = [&](size_t index) {
    const Launch& launch = program.launches[index];
    if (launch.kernel.ends_with("_partial")) return;
    const ir::Node& node = function.nodes.at(node_of(launch));
    const Slot& destination = launch.args.back();
    const auto* base = static_cast<const unsigned char*>(emulator.address(destination));
    ASSERT_NE(base, nullptr) << launch.summary;
    const bool f32 = destination.kind == Slot::Kind::Output || node.type == ScalarType::F32;
    const size_t element_bytes = f32 ? 4 : 2;
    const int64_t rows = node.shape.rows.size, cols = node.shape.cols.size;
    const int64_t matrix_stride = destination.kind == Slot::Kind::Buffer ? function.buffers[static_cast<size_t>(destination.buffer)].elements : rows * cols;
    auto at = [&](int64_t z, int64_t i, int64_t j) { return base + static_cast<size_t>(z * matrix_stride + i * cols + j) * element_bytes; };
    int64_t unwritten = 0, asymmetric = 0;
    std::string first;
    for (int64_t z = 0; z < function.batch; ++z)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          if (is_poison(at(z, i, j), element_bytes) && unwritten++ == 0)
            first = "(" + std::to_string(z) + ", " + std::to_string(i) + ", " + std::to_string(j) + ")";
    EXPECT_EQ(unwritten, 0) << launch.summary << ": elements not written, the first " << first;
    // Triangular products store each element and its mirror; a lincomb of exactly symmetric
    // values is exactly symmetric too.
    const bool exact_symmetry = node.symmetric && rows == cols && function.strategy.triangular_products &&
                                (node.kind == ir::OpKind::Gemm || node.kind == ir::OpKind::LinComb);
    if (!exact_symmetry) return;
    ++symmetric_checked;
    for (int64_t z = 0; z < function.batch; ++z)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = i + 1; j < cols; ++j) asymmetric += std::memcmp(at(z, i, j), at(z, j, i), element_bytes) != 0;
    EXPECT_EQ(asymmetric, 0) << launch.summary << ": elements differ from their mirror";
  };
  const HostEmulator::Result result = emulator.run(input, before, after);
  EXPECT_EQ(result.memory_errors, "");
  bool any_symmetric = false;
  for (const ir::Node& node : function.nodes) any_symmetric |= node.symmetric && node.kind == ir::OpKind::Gemm;
  if (any_symmetric) EXPECT_GT(symmetric_checked, 0) << "no launch was checked for symmetry";

  const std::vector<double> expected = reference::interpret(function, std::vector<double>(input.begin(), input.end()));
  ASSERT_EQ(result.output.size(), expected.size());
  // Tolerance. The emulation and the interpreter store every value in the same type at the same
  // points and round to nearest even; they differ only in arithmetic between stores: f32 sums in
  // MMA order (and an f32 epilogue) against exact-order f64 sums rounded once. A stored 16-bit
  // value therefore now and then lands one unit in the last place (ulp) away from the reference's,
  // and the later steps carry that along without amplifying it much (Newton–Schulz contracts
  // towards the polar factor). Measured: at most 2-3 ulps of the storage type relative to the
  // largest |reference| element; the bound is 8 ulps (2^-8 per bf16 ulp at 1.0, 2^-11 per f16 ulp),
  // as in the fused kernel's test. A slip in a tile bound, a view or a mirror store is an error of
  // the order of the values themselves (hundreds of ulps), a missing write a NaN.
  double largest = 0, worst = 0, error_squares = 0, reference_squares = 0;
  for (size_t e = 0; e < expected.size(); ++e) {
    const double value = result.output[e];
    ASSERT_TRUE(std::isfinite(value)) << "output element " << e << " is " << value << " (not written, or it read poison)";
    largest = std::max(largest, std::abs(expected[e]));
    worst = std::max(worst, std::abs(value - expected[e]));
    error_squares += (value - expected[e]) * (value - expected[e]);
    reference_squares += expected[e] * expected[e];
  }
  ScalarType storage = ScalarType::BF16;
  for (const ir::Node& node : function.nodes)
    if (node.kind == ir::OpKind::Gemm) storage = node.type;
  const double unit = storage == ScalarType::BF16 ? 0x1p-8 : 0x1p-11;
  const double ulps = worst / (unit * largest), relative_frobenius = std::sqrt(error_squares / reference_squares);
  std::printf("  %-52s %3zu launches  max error %5.2f ulps of %s x max|ref|, relative Frobenius %.2e\n", c.name.c_str(), program.launches.size(), ulps,
              std::string(to_string(storage)).c_str(), relative_frobenius);
  EXPECT_LE(worst, 8 * unit * largest) << "largest |reference| " << largest << ", relative Frobenius " << relative_frobenius;
}

void run_cases(const std::vector<Case>& cases) {
  if (!emulation::host_compiler_available()) GTEST_SKIP() << "no host c++ compiler to run the emulation";
  std::vector<std::unique_ptr<HostEmulator>> emulators = compile_all(cases);
  for (size_t c = 0; c < cases.size(); ++c)
    if (emulators[c]) check(cases[c], *emulators[c]);
}

constexpr auto kStandard = ir::StrategyKind::Standard;
constexpr auto kGram = ir::StrategyKind::Gram;

// The shipped programs with their default tiles: both strategies batched, a tall ragged input
// (oriented, so every product reads transposed views), f16, the gram restarts.
TEST(CudaGeneratedEmulation, ShippedProgramsMatchTheReference) {
  std::vector<Case> cases;
  cases.push_back(make_case("jordan_ns5 bf16 standard 40x72x2", schedule(shipped("jordan_ns5"), 40, 72, 2, kStandard, ScalarType::BF16)));
  cases.push_back(make_case("jordan_ns5 bf16 gram 40x72x2", schedule(shipped("jordan_ns5"), 40, 72, 2, kGram, ScalarType::BF16)));
  cases.push_back(make_case("jordan_ns5 bf16 standard 70x33 (tall)", schedule(shipped("jordan_ns5"), 70, 33, 1, kStandard, ScalarType::BF16)));
  cases.push_back(make_case("polar_express5 f16 standard 36x100x3", schedule(shipped("polar_express5"), 36, 100, 3, kStandard, ScalarType::F16)));
  cases.push_back(make_case("gram_polar_express5 f16 gram 70x33x2 (tall)", schedule(shipped("gram_polar_express5"), 70, 33, 2, kGram, ScalarType::F16)));
  run_cases(cases);
}

// Every tile configuration of the search space for every product, on a wide shape that is ragged
// for every tile (48 and 80 rows/columns, k = 80 or 48: a partial last k-step for BK 32 and 64),
// both strategies. Triangular products with a non-square tile take the default (square) tile.
TEST(CudaGeneratedEmulation, EveryTileConfigMatchesTheReference) {
  std::vector<Case> cases;
  for (const TileConfig& tile : tile_configs())
    for (const auto strategy : {kStandard, kGram}) {
      CodegenOptions options;
      options.gemm_tiles.assign(64, tile);
      cases.push_back(make_case("two_steps bf16 " + std::string(ir::to_string(strategy)) + " 48x80x2 tile " + tile.label(),
                                schedule(two_steps("bf16"), 48, 80, 2, strategy), options));
    }
  // Several 128-row tiles per side (triangular: three upper tiles of four), f16, BK 64.
  CodegenOptions big;
  big.gemm_tiles.assign(64, TileConfig{128, 128, 64, 2, 4});
  cases.push_back(make_case("two_steps f16 standard 136x200 tile 128x128x64/2x4", schedule(two_steps("f16"), 136, 200, 1, kStandard), big));
  run_cases(cases);
}

// The rest of the op set: a three-term lincomb (the expanded statement form keeps
// a·X + b·AX + c·A·AX after the products), an f64 norm with the clamp mode, a tall batched input.
TEST(CudaGeneratedEmulation, LinCombAndF64NormMatchTheReference) {
  const dsl::Program expanded = dsl::parse_program(
      "orthogonalizer expanded {\n  precision { storage = f16; accumulate = f32; norm = f64; }\n"
      "  normalize frobenius(safety = 1.01, eps = 1e-7, mode = clamp);\n  coefficients jordan repeat 2;\n"
      "  step {\n    A = X @ X.T;\n    AX = A @ X;\n    X = a * X + b * AX + c * A @ AX;\n  }\n}\n");
  std::vector<Case> cases;
  cases.push_back(make_case("expanded f16 f64-norm standard 90x40x2 (tall)", schedule(expanded, 90, 40, 2, kStandard)));
  cases.push_back(make_case("deepseek_v4 bf16 gram 32x96", schedule(shipped("deepseek_v4"), 32, 96, 1, kGram)));
  const Case& lincomb = cases[0];
  size_t terms = 0;
  for (const ir::Node& node : lincomb.function.nodes)
    if (node.kind == ir::OpKind::LinComb) terms = std::max(terms, node.operands.size());
  EXPECT_GE(terms, 3u) << "the expanded form should keep a three-term lincomb";
  EXPECT_NE(lincomb.program.source.find("double sum = 0;"), std::string::npos);
  EXPECT_NE(lincomb.program.source.find("(norm > eps ? norm : eps)"), std::string::npos);
  run_cases(cases);
}

}  // namespace
}  // namespace orthojit::cuda
