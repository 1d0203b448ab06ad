// generate_cuda's per-op kernels run on the CPU (tests/cuda_host_emulator.h): the main GPU path's
// index math, tiling, vector loads, triangular scheduling and mirror stores, epilogues
// (α·acc + β·C + γ·I), normalization and batching, against the f64 reference interpreter, for
// every tile configuration of the search space and for ragged, tall and batched shapes. Without a
// host `c++` the tests are skipped. (On a GPU, tests/cuda_device_test.cpp checks the same numbers.)
//
// Besides the output, every launch is checked as it runs, on its own: its destination buffer is
// poisoned before it (unless it also reads it), and after it every element of its value must be
// written and within half a unit in the last place plus the f32 arithmetic's error bound of the
// f64 result computed from the values its operands hold; a triangular product's value (and a
// lincomb of them) must be exactly symmetric; the red zones around the allocations and the
// alignment gaps between buffers must stay poisoned.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "cuda/cuda_codegen.h"
#include "cuda/hopper_codegen.h"
#include "cuda_host_emulator.h"
#include "dsl/parser.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"

namespace orthojit::cuda {
namespace {

using emulation::HostEmulator;

bool triangular(const ir::Function& function, const ir::Node& node);

ir::Function schedule(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, ir::StrategyKind strategy,
                      std::optional<ScalarType> precision = std::nullopt, std::optional<std::vector<int>> gram_restarts = std::nullopt) {
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  options.strategy = strategy;
  options.precision = precision;
  options.gram_restarts = gram_restarts;
  return passes::compile_program(program, options);
}

dsl::Program shipped(const char* name) { return kernels::load_program_by_name_or_path(name); }

// Jordan steps, every kind of product the standard schedule makes: X·Xᵀ (triangular, B read
// k-contiguous), c·A·A + b·A (triangular, with C), B·X + a·X (dense, row-major B); the gram
// strategy turns them into m x m chains.
dsl::Program steps(const char* storage, int count) {
  return dsl::parse_program(std::string("orthogonalizer steps {\n  precision { storage = ") + storage +
                            "; accumulate = f32; norm = f32; }\n  normalize frobenius(safety = 1.0, eps = 1e-7);\n"
                            "  coefficients jordan repeat " + std::to_string(count) +
                            ";\n  step {\n    A = X @ X.T;\n    B = b * A + c * A @ A;\n    X = a * X + B @ X;\n  }\n}\n");
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
        std::string directory_name = "orthojit_emulation_" + std::to_string(::getpid()) + "_" + cases[c].name;
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

// The node a launch computes: kernels are named "<op>_<node index>[_max|_partial|_scale]".
size_t node_of(const Launch& launch) {
  const size_t begin = launch.kernel.find('_') + 1;
  return static_cast<size_t>(std::stoul(launch.kernel.substr(begin)));
}

// A node's value as it lies in the emulator's memory, written here from the IR's meaning (the
// buffer plan: batch matrices of `elements` each, row-major; a transpose is a view; input and
// output are dense f32), independently of the generator's own view bookkeeping.
struct HostView {
  Slot slot;
  ScalarType type = ScalarType::F32;
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 1, matrix_stride = 0;
};

std::vector<HostView> host_views(const ir::Function& function) {
  std::vector<HostView> views(function.nodes.size());
  for (size_t index = 0; index < function.nodes.size(); ++index) {
    const ir::Node& node = function.nodes[index];
    HostView& view = views[index];
    view.rows = node.shape.rows.size;
    view.cols = node.shape.cols.size;
    view.row_stride = view.cols;
    view.matrix_stride = view.rows * view.cols;
    view.type = node.type;
    if (node.kind == ir::OpKind::Transpose) {
      view = views[static_cast<size_t>(node.operands[0])];
      std::swap(view.rows, view.cols);
      std::swap(view.row_stride, view.col_stride);
    } else if (node.kind == ir::OpKind::Input || node.kind == ir::OpKind::Output) {
      view.slot = {node.kind == ir::OpKind::Input ? Slot::Kind::Input : Slot::Kind::Output, -1};
      view.type = ScalarType::F32;
    } else {
      view.slot = {Slot::Kind::Buffer, node.buffer};
      view.matrix_stride = function.buffers.at(static_cast<size_t>(node.buffer)).elements;
    }
  }
  return views;
}

size_t element_bytes(ScalarType type) { return type == ScalarType::F32 ? 4 : 2; }

const unsigned char* element_address(const HostEmulator& emulator, const HostView& view, int64_t z, int64_t i, int64_t j) {
  const auto* base = static_cast<const unsigned char*>(emulator.address(view.slot));
  return base + static_cast<size_t>(z * view.matrix_stride + i * view.row_stride + j * view.col_stride) * element_bytes(view.type);
}

double decode(ScalarType type, const unsigned char* at) {
  if (type == ScalarType::F32) {
    float value;
    std::memcpy(&value, at, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  if (type == ScalarType::BF16) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
  }
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  const double sign = bits & 0x8000 ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * HUGE_VAL;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

bool is_poison(const unsigned char* element, size_t bytes) {
  for (size_t b = 0; b < bytes; ++b)
    if (element[b] != 0xff) return false;
  return true;
}

// The spacing of `type`'s values around |x| (its subnormal spacing at least).
double ulp(ScalarType type, double x) {
  const int precision = type == ScalarType::BF16 ? 8 : type == ScalarType::F16 ? 11 : 24;
  const double smallest = type == ScalarType::BF16 ? 0x1p-133 : type == ScalarType::F16 ? 0x1p-24 : 0x1p-149;
  if (x == 0) return smallest;
  int exponent;
  std::frexp(x, &exponent);  // |x| in [2^(exponent-1), 2^exponent)
  return std::max(smallest, std::ldexp(1.0, exponent - precision));
}

bool triangular(const ir::Function& function, const ir::Node& node) {
  return node.kind == ir::OpKind::Gemm && node.symmetric && function.strategy.triangular_products && node.shape.rows.size == node.shape.cols.size;
}

// What one launch must produce, computed in f64 from the values its operands hold in the
// emulator's memory right before it runs (so each kernel is checked on its own, not through the
// iteration), with a per-element allowance: half a unit in the last place of the stored result
// (the kernel rounds once) plus the f32 arithmetic's error bound, 2^-24 per operation on the sum
// of the magnitudes involved (f32 sums in any order, coefficients printed as f32 literals).
struct Expected {
  std::vector<double> value, slack;  // batch x rows x cols
};

Expected expected_values(const HostEmulator& emulator, const ir::Function& function, const std::vector<HostView>& views, const Launch& launch) {
  constexpr double u = 0x1p-24;
  const size_t index = node_of(launch);
  const ir::Node& node = function.nodes[index];
  const HostView& out = views[index];
  auto operand = [&](size_t k) -> const HostView& { return views[static_cast<size_t>(node.operands[k])]; };
  auto at = [&](const HostView& view, int64_t z, int64_t i, int64_t j) { return decode(view.type, element_address(emulator, view, z, i, j)); };
  Expected expected;
  const size_t elements = static_cast<size_t>(function.batch * out.rows * out.cols);
  expected.value.resize(elements);
  expected.slack.resize(elements);
  for (int64_t z = 0; z < function.batch; ++z) {
    double denominator = 0, denominator_operations = 0;
    if (node.kind == ir::OpKind::Normalize) {
      const HostView& x = operand(0);
      double squares = 0;
      for (int64_t i = 0; i < x.rows; ++i)
        for (int64_t j = 0; j < x.cols; ++j) squares += at(x, z, i, j) * at(x, z, i, j);
      const double norm = std::sqrt(squares) * node.normalization.safety;
      denominator = node.normalization.mode == dsl::Normalization::Mode::Add ? norm + node.normalization.eps : std::max(norm, node.normalization.eps);
      denominator_operations = static_cast<double>(x.rows * x.cols + 8);  // f32 sums of squares, sqrt, safety, eps, the cast to f32
    }
    for (int64_t i = 0; i < out.rows; ++i)
      for (int64_t j = 0; j < out.cols; ++j) {
        double value = 0, magnitude = 0;
        switch (node.kind) {
          case ir::OpKind::Gemm: {
            const HostView &a = operand(0), &b = operand(1);
            // A triangular product computes the upper triangle and mirrors it. (A·B of commuting
            // symmetric A and B, say two polynomials in R, is symmetric only up to rounding, so
            // its lower triangle is not Σ A_ik·B_kj there.)
            const bool mirrored = triangular(function, node) && i > j;
            const int64_t r = mirrored ? j : i, s = mirrored ? i : j;
            double sum = 0, sum_abs = 0;
            for (int64_t k = 0; k < a.cols; ++k) {
              const double product = at(a, z, r, k) * at(b, z, k, s);
              sum += product;
              sum_abs += std::abs(product);
            }
            value = node.alpha * sum + (i == j ? node.gamma : 0.0);
            magnitude = static_cast<double>(a.cols + 4) * std::abs(node.alpha) * sum_abs + 4 * std::abs(node.gamma);
            if (node.operands.size() == 3) {
              const double c = node.beta * at(operand(2), z, r, s);
              value += c;
              magnitude += 4 * std::abs(c);
            }
            break;
          }
          case ir::OpKind::LinComb:
            value = i == j ? node.gamma : 0.0;
            magnitude = 4 * std::abs(value);
            for (size_t k = 0; k < node.operands.size(); ++k) {
              const double term = node.coefficients[k] * at(operand(k), z, i, j);
              value += term;
              magnitude += static_cast<double>(node.operands.size() + 3) * std::abs(term);
            }
            break;
          case ir::OpKind::Normalize:
            value = at(operand(0), z, i, j) / denominator;
            magnitude = std::abs(value) * (denominator_operations + 2);  // the denominator's error, the division
            break;
          case ir::OpKind::Output: value = at(operand(0), z, i, j); break;  // 16-bit to f32: exact
          default: break;
        }
        const size_t e = static_cast<size_t>((z * out.rows + i) * out.cols + j);
        expected.value[e] = value;
        expected.slack[e] = u * magnitude;
      }
  }
  return expected;
}

// Runs one case, checking each launch as it goes, and compares the output with the reference.
void check(const Case& c, HostEmulator& emulator) {
  SCOPED_TRACE(c.name);
  const ir::Function& function = c.function;
  const CudaProgram& program = c.program;
  const std::vector<HostView> views = host_views(function);
  std::mt19937 generator(20240611);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> input(static_cast<size_t>(program.batch * program.input_elements));
  for (float& value : input) value = normal(generator);

  int symmetric_checked = 0;
  double worst_launch_ulps = 0;  // the largest |emulated - expected| over all launches, in units in the last place of the stored value
  Expected expected;
  auto before = [&](size_t index) {
    const Launch& launch = program.launches[index];
    if (launch.kernel.ends_with("_splitk_partial")) {
      // Poisoned (f32 NaN) so that a partial tile not written shows in the sum the next launch makes.
      const Slot& workspace = launch.destination();
      std::memset(emulator.address(workspace), 0xff, static_cast<size_t>(program.buffer_bytes[static_cast<size_t>(workspace.buffer)]));
      return;
    }
    if (launch.kernel.ends_with("_partial") || launch.kernel.ends_with("_max")) return;  // a normalize's reductions
    expected = expected_values(emulator, function, views, launch);
    const Slot& destination = launch.destination();
    if (destination.kind != Slot::Kind::Buffer || destination.buffer < 0) return;
    const std::vector<Slot> operands = launch.operands();
    for (const Slot& operand : operands)
      if (&operand != &operands.back() && operand.kind == Slot::Kind::Buffer && operand.buffer == destination.buffer) return;  // reads what it writes
    std::memset(emulator.address(destination), 0xff, static_cast<size_t>(program.buffer_bytes[static_cast<size_t>(destination.buffer)]));
  };
  auto after = [&](size_t index) {
    const Launch& launch = program.launches[index];
    if (launch.kernel.ends_with("_partial") || launch.kernel.ends_with("_max")) return;
    const ir::Node& node = function.nodes.at(node_of(launch));
    const HostView& out = views[node_of(launch)];
    int64_t unwritten = 0, wrong = 0, asymmetric = 0;
    std::string first_unwritten, first_wrong;
    for (int64_t z = 0; z < function.batch; ++z)
      for (int64_t i = 0; i < out.rows; ++i)
        for (int64_t j = 0; j < out.cols; ++j) {
          const unsigned char* element = element_address(emulator, out, z, i, j);
          const std::string where = "(" + std::to_string(z) + ", " + std::to_string(i) + ", " + std::to_string(j) + ")";
          if (is_poison(element, element_bytes(out.type))) {
            if (unwritten++ == 0) first_unwritten = where;
            continue;
          }
          const size_t e = static_cast<size_t>((z * out.rows + i) * out.cols + j);
          const double value = decode(out.type, element), want = expected.value[e];
          if (!std::isfinite(want)) continue;  // an operand is already wrong (reported at its launch)
          const double unit = ulp(out.type, std::max(std::abs(value), std::abs(want))), allowance = 0.5 * unit + expected.slack[e];
          const double error = std::abs(value - want);
          worst_launch_ulps = std::max(worst_launch_ulps, error / unit);
          if (!(error <= allowance) && wrong++ == 0)
            first_wrong = where + ": " + std::to_string(value) + " instead of " + std::to_string(want) + " (allowed " + std::to_string(allowance) + ")";
        }
    EXPECT_EQ(unwritten, 0) << launch.summary << ": elements not written, the first " << first_unwritten;
    EXPECT_EQ(wrong, 0) << launch.summary << ": elements off, the first " << first_wrong;
    // Triangular products store each element and its mirror; a lincomb of exactly symmetric
    // values is exactly symmetric too.
    const bool exact_symmetry = node.symmetric && out.rows == out.cols && function.strategy.triangular_products &&
                                (node.kind == ir::OpKind::Gemm || node.kind == ir::OpKind::LinComb);
    if (!exact_symmetry) return;
    ++symmetric_checked;
    for (int64_t z = 0; z < function.batch; ++z)
      for (int64_t i = 0; i < out.rows; ++i)
        for (int64_t j = i + 1; j < out.cols; ++j)
          asymmetric += std::memcmp(element_address(emulator, out, z, i, j), element_address(emulator, out, z, j, i), element_bytes(out.type)) != 0;
    EXPECT_EQ(asymmetric, 0) << launch.summary << ": elements differ from their mirror";
  };
  const HostEmulator::Result result = emulator.run(input, before, after);
  EXPECT_EQ(result.memory_errors, "");
  bool any_symmetric = false;
  for (const ir::Node& node : function.nodes) any_symmetric |= node.symmetric && node.kind == ir::OpKind::Gemm;
  if (any_symmetric) {
    EXPECT_GT(symmetric_checked, 0) << "no launch was checked for symmetry";
  }

  // The whole iteration against the reference interpreter. The emulation and the interpreter store
  // every value in the same type at the same points, rounding to nearest even; they differ only in
  // the arithmetic between stores (f32 sums in MMA order, f32 epilogues and coefficients, against
  // f64 rounded once), so a stored 16-bit value now and then lands one unit in the last place (ulp)
  // away from the reference's, and the later steps carry that along. The standard iteration damps
  // it: measured at most 4.1 ulps of the storage type relative to the largest |reference|
  // element; the bound is 8 (2^-8 per bf16 ulp at 1.0, 2^-11 per f16 ulp), as in the fused
  // kernel's test. The gram iteration's m x m chain amplifies one flipped rounding by tens of f16
  // ulps (the reference itself moves 40 ulps when its input moves half an f16 ulp), so gram cases
  // are held to a relative Frobenius error of 1e-2 instead (measured up to 7e-3 in f16; the GPU
  // test's bound is 1e-2 for f16). Index slips do not hide behind either bound: the per-launch
  // checks above allow only the arithmetic's own error, and a slip in a tile bound, a view or a
  // mirror store is an error of the order of the values themselves.
  const std::vector<double> reference = reference::interpret(function, std::vector<double>(input.begin(), input.end()));
  ASSERT_EQ(result.output.size(), reference.size());
  double largest = 0, worst = 0, error_squares = 0, reference_squares = 0;
  for (size_t e = 0; e < reference.size(); ++e) {
    const double value = result.output[e];
    ASSERT_TRUE(std::isfinite(value)) << "output element " << e << " is " << value << " (not written, or it read poison)";
    largest = std::max(largest, std::abs(reference[e]));
    worst = std::max(worst, std::abs(value - reference[e]));
    error_squares += (value - reference[e]) * (value - reference[e]);
    reference_squares += reference[e] * reference[e];
  }
  ScalarType storage = ScalarType::BF16;
  for (const ir::Node& node : function.nodes)
    if (node.kind == ir::OpKind::Gemm) storage = node.type;
  const double unit = storage == ScalarType::BF16 ? 0x1p-8 : 0x1p-11;
  const double ulps = worst / (unit * largest), relative_frobenius = std::sqrt(error_squares / reference_squares);
  std::printf("  %-50s %2zu launches, each within %.2f ulp of its own f64 result; output vs reference: %5.2f ulps of %s x max|ref|, relative Frobenius %.1e\n",
              c.name.c_str(), program.launches.size(), worst_launch_ulps, ulps, std::string(to_string(storage)).c_str(), relative_frobenius);
  if (function.strategy.kind == ir::StrategyKind::Gram) {
    EXPECT_LE(relative_frobenius, 1e-2) << "max error " << ulps << " ulps";
  } else {
    EXPECT_LE(worst, 8 * unit * largest) << "largest |reference| " << largest << ", relative Frobenius " << relative_frobenius;
  }
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

// Every tile configuration of the search space on every kind of product, on a wide shape that is
// ragged for every tile (48 and 80 rows/columns, k = 80 or 48: a partial last k-step for BK 32 and
// 64), both strategies, six steps per program (so that it builds and runs in seconds). Dense
// products take the configurations in turn, the non-square ones first; triangular products take
// the square ones in turn (generate_cuda gives a triangular product with a non-square tile the
// default tile). The standard schedule has one dense and two triangular products per step; the gram
// one restarts after steps 1, 3 and 5 here, so it has four dense products (Q·X) and m x m chains
// of two steps between them.
CodegenOptions rotating_tiles(const ir::Function& function) {
  std::vector<TileConfig> dense_order, square;
  for (const TileConfig& tile : tile_configs()) (tile.bm == tile.bn ? square : dense_order).push_back(tile);
  dense_order.insert(dense_order.end(), square.begin(), square.end());
  CodegenOptions options;
  size_t dense = 0, upper = 0;
  for (const ir::Node& node : function.nodes)
    if (node.kind == ir::OpKind::Gemm)
      options.gemm_tiles.push_back(triangular(function, node) ? square[upper++ % square.size()] : dense_order[dense++ % dense_order.size()]);
  return options;
}

TEST(CudaGeneratedEmulation, EveryTileConfigMatchesTheReference) {
  std::vector<Case> cases;
  for (const auto strategy : {kStandard, kGram}) {
    ir::Function function = schedule(steps("bf16", 6), 48, 80, 2, strategy, std::nullopt, std::vector<int>{1, 3, 5});
    CodegenOptions options = rotating_tiles(function);
    cases.push_back(make_case("six_steps bf16 " + std::string(ir::to_string(strategy)) + " 48x80x2, all tiles", std::move(function), std::move(options)));
  }
  // Several 128-row tiles per side (triangular: three upper tiles of four), f16, BK 64.
  CodegenOptions big;
  big.gemm_tiles.assign(64, TileConfig{128, 128, 64, 2, 4});
  cases.push_back(make_case("two_steps f16 standard 136x200 tile 128x128x64/2x4", schedule(steps("f16", 2), 136, 200, 1, kStandard), big));
  // Square tiles whose row of 8-column chunks is not a power of two (12 and 6 chunks), which a
  // user can name (--variant, per-product lists, a search space's tiles): the mirror tile's XOR
  // swizzle would leave the row, so their triangular products mirror element by element. Several
  // tiles per side, ragged.
  CodegenOptions wide_square, narrow_square;
  wide_square.gemm_tiles.assign(64, TileConfig{96, 96, 32, 2, 2});
  narrow_square.gemm_tiles.assign(64, TileConfig{48, 48, 32, 1, 1});
  cases.push_back(make_case("jordan_ns5 bf16 standard 192x256 tile 96x96x32/2x2", schedule(shipped("jordan_ns5"), 192, 256, 1, kStandard, ScalarType::BF16), wide_square));
  cases.push_back(make_case("jordan_ns5 bf16 gram 100x264 tile 48x48x32/1x1", schedule(shipped("jordan_ns5"), 100, 264, 1, kGram, ScalarType::BF16), narrow_square));
  // Coverage: every square configuration ran a triangular product in both programs, every one a
  // dense product in the standard program, every non-square one a dense product in the gram one.
  for (const Case& c : {cases[0], cases[1]})
    for (const TileConfig& tile : tile_configs()) {
      bool dense = false, upper = false;
      for (const Launch& launch : c.program.launches)
        if (launch.summary.find("tile " + tile.label()) != std::string::npos) (launch.summary.find(" triangular") != std::string::npos ? upper : dense) = true;
      const bool square = tile.bm == tile.bn;
      EXPECT_TRUE(dense || (square && c.function.strategy.kind == kGram)) << c.name << ": no dense product with " << tile.label();
      EXPECT_TRUE(upper || !square) << c.name << ": no triangular product with " << tile.label();
    }
  run_cases(cases);
}

// The 16-byte epilogue (quad_transpose, then one C load and one D store per lane and row chunk)
// computes each element as the scalar one does, so the two give the same bits: both run here on
// the same input, every launch's destination compared. Cases with vector C (B·X + a·X reads X
// row-major), scalar C (a transposed view), every tile of the search space, both strategies. The
// triangular products of the vector runs write their mirrored tile through shared memory (where
// the tile's cp.async stages hold it) and the scalar runs element by element, so the two mirror
// paths are compared bit for bit too, the lower triangles included; one pair runs with a single
// SM's worth of persistent CTAs, so each CTA takes several work items (and matrices of the batch)
// one after the other through the same shared memory.
TEST(CudaGeneratedEmulation, VectorEpilogueIsTheScalarOneBitForBit) {
  if (!emulation::host_compiler_available()) GTEST_SKIP() << "no host c++ compiler to run the emulation";
  std::vector<Case> cases;
  for (const auto strategy : {kStandard, kGram}) {
    ir::Function function = schedule(steps("bf16", 3), 48, 80, 2, strategy, std::nullopt, std::vector<int>{1});
    CodegenOptions vector = rotating_tiles(function), scalar = vector;
    scalar.vector_epilogue = false;
    const std::string name = "three_steps bf16 " + std::string(ir::to_string(strategy)) + " 48x80x2";
    cases.push_back(make_case(name + " vector", function, vector));
    cases.push_back(make_case(name + " scalar", std::move(function), scalar));
  }
  {
    ir::Function function = schedule(shipped("polar_express5"), 104, 40, 1, kStandard, ScalarType::F16);  // tall: oriented views
    CodegenOptions scalar;
    scalar.vector_epilogue = false;
    cases.push_back(make_case("polar_express5 f16 standard 104x40 vector", function));
    cases.push_back(make_case("polar_express5 f16 standard 104x40 scalar", std::move(function), scalar));
  }
  {
    // 200 rows in 64-row tiles: 10 upper tiles per matrix, 20 work items over a batch of 2, taken
    // by the emulation's kEmulatedMultiprocessors CTAs (band height for one SM's wave: multiprocessors = 1);
    // ragged (200 = 3·64 + 8).
    ir::Function function = schedule(steps("bf16", 2), 200, 264, 2, kStandard, std::nullopt);
    CodegenOptions vector;
    vector.multiprocessors = 1;
    vector.gemm_tiles.assign(6, TileConfig{64, 64, 32, 2, 2});
    CodegenOptions scalar = vector;
    scalar.vector_epilogue = false;
    cases.push_back(make_case("two_steps bf16 standard 200x264x2 persistent vector", function, vector));
    cases.push_back(make_case("two_steps bf16 standard 200x264x2 persistent scalar", std::move(function), scalar));
  }
  std::vector<std::unique_ptr<HostEmulator>> emulators = compile_all(cases);
  for (size_t c = 0; c + 1 < cases.size(); c += 2) {
    SCOPED_TRACE(cases[c].name);
    ASSERT_TRUE(emulators[c] && emulators[c + 1]);
    const CudaProgram &vector = cases[c].program, &scalar = cases[c + 1].program;
    ASSERT_EQ(vector.launches.size(), scalar.launches.size());
    int vector_products = 0;
    for (const Launch& launch : vector.launches) vector_products += launch.kernel.rfind("gemm_", 0) == 0 && !launch.triangular;
    EXPECT_GT(vector_products, 0);
    EXPECT_NE(vector.source.find("VECTOR_D = true"), std::string::npos) << "no product took the 16-byte epilogue";
    int shared_mirrors = 0;
    for (const Launch& launch : vector.launches) shared_mirrors += launch.summary.find("shared-memory mirror") != std::string::npos;
    for (const Launch& launch : scalar.launches) EXPECT_EQ(launch.summary.find("shared-memory mirror"), std::string::npos) << launch.summary;
    if (cases[c].name.find("persistent") != std::string::npos) {
      EXPECT_GT(shared_mirrors, 0);
      for (const Launch& launch : vector.launches)
        if (launch.triangular) {
          EXPECT_EQ(launch.grid[0], 20) << launch.summary;
          EXPECT_TRUE(launch.persistent);
          EXPECT_EQ(launch.ctas(emulation::kEmulatedMultiprocessors), emulation::kEmulatedMultiprocessors) << "several items per CTA";
        }
    }
    EXPECT_EQ(scalar.source.find("VECTOR_D = true"), std::string::npos);
    std::mt19937 generator(20261202);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> input(static_cast<size_t>(vector.batch * vector.input_elements));
    for (float& value : input) value = normal(generator);
    // After each product, its destination buffer in both runs (the bytes the product wrote).
    std::vector<std::vector<unsigned char>> written[2];
    for (int run = 0; run < 2; ++run) {
      HostEmulator& emulator = *emulators[c + static_cast<size_t>(run)];
      const CudaProgram& program = emulator.program();
      auto after = [&](size_t index) {
        const Launch& launch = program.launches[index];
        const Slot& destination = launch.destination();
        if (launch.kernel.rfind("gemm_", 0) != 0 || destination.kind != Slot::Kind::Buffer || destination.buffer < 0) return;
        const auto* bytes = static_cast<const unsigned char*>(emulator.address(destination));
        written[run].emplace_back(bytes, bytes + program.buffer_bytes[static_cast<size_t>(destination.buffer)]);
      };
      const HostEmulator::Result result = emulator.run(input, {}, after);
      EXPECT_EQ(result.memory_errors, "");
    }
    ASSERT_EQ(written[0].size(), written[1].size());
    for (size_t k = 0; k < written[0].size(); ++k) EXPECT_TRUE(written[0][k] == written[1][k]) << "product " << k << " differs";
  }
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

// A left operand read transposed (Xᵀ·X: A is m-contiguous), stored as loaded and read by
// ldmatrix.x4.trans (shared_layout.h): 16-byte chunks through cp.async, pairs and single values
// register-staged (ragged extents), every tile configuration in turn.
TEST(CudaGeneratedEmulation, TransposedLeftOperandsMatchTheReference) {
  const dsl::Program program = dsl::parse_program(
      "orthogonalizer transposed_left {\n  precision { storage = bf16; accumulate = f32; norm = f32; }\n"
      "  normalize frobenius(safety = 1.0, eps = 1e-7);\n  coefficients jordan repeat 2;\n"
      "  step {\n    A = X.T @ X;\n    X = a * X + b * X @ A;\n  }\n}\n");
  std::vector<Case> cases;
  cases.push_back(make_case("transposed_left bf16 48x80x2", schedule(program, 48, 80, 2, kStandard)));
  cases.push_back(make_case("transposed_left bf16 37x70 (pairs)", schedule(program, 37, 70, 1, kStandard)));
  cases.push_back(make_case("transposed_left bf16 37x71 (single values)", schedule(program, 37, 71, 1, kStandard)));
  ir::Function rotated = schedule(program, 48, 80, 1, kStandard);
  CodegenOptions options = rotating_tiles(rotated);
  cases.push_back(make_case("transposed_left bf16 48x80, all tiles", std::move(rotated), std::move(options)));
  for (const Case& c : cases)
    EXPECT_NE(c.program.source.find("A_K_CONTIGUOUS = false"), std::string::npos) << c.name << ": no product reads A by ldmatrix";
  EXPECT_NE(cases[0].program.source.find("PIPELINED = true"), std::string::npos);
  run_cases(cases);
}

// Products on the sm_90a tile (CodegenOptions::hopper_products), its primitives emulated by
// tests/hopper_host_emulation.h (TMA boxes with the swizzle, mbarrier phases, wgmma as the
// asynchronous warpgroup collective): the same per-launch checks and reference as above. Each
// program must send its products to the tile (a silent fallback to mma.sync would prove nothing):
// X·Xᵀ and A·A triangular (upper tiles only, mirrored stores), B·X dense with an MN-major B, the
// ragged edges of 136 rows and 200 columns (partial tiles along M, N and K), both strategies, and a
// batch of 3 (grid.z; each box zero-filled at its own matrix's edge, not read from the next).
TEST(CudaGeneratedEmulation, HopperTileProductsMatchTheReference) {
  std::vector<Case> cases;
  // Split-K per product, mixed with unsplit products in each program (a split of 1, or one that
  // does not fit the product's K, keeps the unsplit tile): K = 200 is 4 K tiles of 64 (2 splits of
  // 2, 4 of 1; 3 would leave an empty split: not offered), K = 136 is 3 (3 splits of 1; 2 splits of
  // 2 and 1: a shorter last split); the batch of 3 splits too. In the standard programs the dense
  // B·X runs on the 128x256 tile (its N of 200 and 136 ragged inside one tile column). One
  // program per form keeps the emulation's compile time to three programs.
  auto split = [](const ir::Function& function, std::vector<int> splits, bool wide_dense) {
    CodegenOptions options;
    size_t next = 0;
    for (const ir::Node& node : function.nodes)
      if (node.kind == ir::OpKind::Gemm) {
        const int s = splits[next++ % splits.size()];
        if (wide_dense && !node.symmetric) options.gemm_tiles.push_back(sm90a_wide_tile());
        else options.gemm_tiles.push_back(split_k_valid(function.node(node.operands[0]).shape.cols.size, s) ? sm90a_tile(s) : sm90a_tile());
      }
    return options;
  };
  const ir::Function standard = schedule(shipped("jordan_ns5"), 136, 200, 1, kStandard, ScalarType::BF16);
  const ir::Function gram = schedule(shipped("jordan_ns5"), 136, 200, 1, kGram, ScalarType::BF16);
  const ir::Function batched = schedule(shipped("jordan_ns5"), 72, 136, 3, kStandard, ScalarType::BF16);
  cases.push_back(make_case("jordan_ns5 bf16 standard 136x200 sm_90a tile", standard, split(standard, {2, 3, 4, 1}, true)));
  cases.push_back(make_case("jordan_ns5 bf16 gram 136x200 sm_90a tile", gram, split(gram, {3, 2, 1}, false)));
  cases.push_back(make_case("jordan_ns5 bf16 standard 72x136x3 sm_90a tile", batched, split(batched, {2, 1}, true)));
  for (const Case& c : cases) {
    int tile_launches = 0, products = 0, triangular_tiles = 0;
    for (const Launch& launch : c.program.launches) {
      products += launch.product >= 0;
      tile_launches += launch.hopper_tile();
      triangular_tiles += launch.hopper_tile() && launch.triangular;
    }
    EXPECT_TRUE(c.program.needs_sm90a()) << c.name;
    EXPECT_EQ(tile_launches, products) << c.name << ": every product of this program can run on the tile";
    EXPECT_GT(triangular_tiles, 0) << c.name;
    int split_launches = 0, unsplit_launches = 0;
    for (const Launch& launch : c.program.launches)
      if (!launch.tensor_maps.empty()) (launch.tile.splits > 1 ? split_launches : unsplit_launches) += 1;
    EXPECT_GT(split_launches, 0) << c.name << ": some products split K";
    EXPECT_GT(unsplit_launches, 0) << c.name << ": some products keep the unsplit tile";
    int wide_launches = 0;
    for (const Launch& launch : c.program.launches) wide_launches += launch.hopper_tile() && launch.tile.label() == sm90a_wide_tile().label();
    EXPECT_EQ(wide_launches > 0, c.name.find("standard") != std::string::npos) << c.name << ": the dense products of the standard programs take the 128x256 tile";
  }
  run_cases(cases);
}

// Static shared memory starts every CTA poisoned, as dynamic shared memory does: each CTA of this
// kernel reads the slot the CTA before it wrote, and the first reads one nobody wrote. On a device
// those are stale or arbitrary values; a C++ static would give the previous CTA's 1.0 and a first
// 0.0, so a kernel that reads shared memory it did not write (a ragged tile's padding) would pass
// the emulation and fail the device.
TEST(CudaGeneratedEmulation, StaticSharedMemoryIsPoisonedBeforeEveryCta) {
  if (!emulation::host_compiler_available()) GTEST_SKIP() << "no host c++ compiler to run the emulation";
  CudaProgram program;
  program.source =
      "#include \"orthojit_device.cuh\"\n"
      "extern \"C\" __global__ void peek(float* out) {\n"
      "  __shared__ float slots[4];\n"
      "  if (threadIdx.x == 0) {\n"
      "    out[blockIdx.x] = slots[blockIdx.x % 4];\n"
      "    slots[(blockIdx.x + 1) % 4] = 1.0f;\n"
      "  }\n"
      "}\n"
      "// The same inside a device template, as oj::mma::product declares its stages.\n"
      "template <int N>\n"
      "__device__ __forceinline__ void peek_in_template(float* out) {\n"
      "  OJ_TEMPLATE_SHARED(__align__(16) float, slots, N);\n"
      "  if (threadIdx.x == 0) {\n"
      "    out[4 + blockIdx.x] = slots[blockIdx.x % N];\n"
      "    slots[(blockIdx.x + 1) % N] = 1.0f;\n"
      "  }\n"
      "}\n"
      "extern \"C\" __global__ void peek_template(float* out) { peek_in_template<4>(out); }\n";
  for (const char* kernel : {"peek", "peek_template"}) {
    Launch launch;
    launch.kernel = kernel;
    launch.grid[0] = 4;
    launch.block = 32;
    launch.args = {Slot{Slot::Kind::Output, -1}};
    launch.summary = std::string(kernel) + " at static shared memory";
    program.launches.push_back(launch);
  }
  program.input_elements = 1;
  program.output_elements = 8;
  HostEmulator emulator(program, std::filesystem::path(::testing::TempDir()) / ("orthojit_emulation_" + std::to_string(::getpid()) + "_static_shared"));
  const HostEmulator::Result result = emulator.run({0.0f});
  ASSERT_EQ(result.output.size(), 8u);
  for (size_t cta = 0; cta < 8; ++cta)
    EXPECT_TRUE(std::isnan(result.output[cta])) << (cta < 4 ? "kernel" : "template") << " CTA " << cta % 4 << " read " << result.output[cta];
}

// Every static shared array of the device headers is one the emulation poisons: declared in a
// device template only through OJ_TEMPLATE_SHARED (GCC drops the section that plain `__shared__`
// gets in the emulation on a template's static locals), so `__shared__` appears in the headers
// only as `extern __shared__` (dynamic shared memory, poisoned too) or in that macro's definition.
TEST(CudaGeneratedEmulation, DeviceHeadersDeclareStaticSharedArraysThroughThePoisonedForms) {
  const std::filesystem::path folder = std::filesystem::path(ORTHOJIT_SOURCE_DIR) / "kernels" / "cuda";
  int headers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (entry.path().extension() != ".cuh") continue;
    ++headers;
    std::ifstream file(entry.path());
    std::string line;
    for (int number = 1; std::getline(file, line); ++number) {
      const std::string code = line.substr(0, line.find("//"));
      if (code.find("__shared__") == std::string::npos) continue;
      const bool allowed = code.find("extern __shared__") != std::string::npos || code.find("#define OJ_TEMPLATE_SHARED") != std::string::npos;
      EXPECT_TRUE(allowed) << entry.path().filename().string() << ":" << number << ": " << line;
    }
  }
  EXPECT_GT(headers, 3);
}

}  // namespace
}  // namespace orthojit::cuda
