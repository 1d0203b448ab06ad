// The blocked GEMM with its JIT-compiled microkernel against a plain double-precision product:
// odd sizes (edge tiles in every direction), several K blocks, transposed operands, the fused
// epilogue α·A·B + β·C + γ·I, 16-bit storage, triangular products, every ISA path this CPU runs.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/element_types.h"
#include "cpu/gemm_driver.h"
#include "cpu/kernel_cache.h"
#include "reference/random_matrix.h"

namespace orthojit::cpu {
namespace {

struct Storage {
  ScalarType type;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  int64_t rows, cols;
  Storage(ScalarType t, const std::vector<double>& values, int64_t r, int64_t c) : type(t), rows(r), cols(c) {
    for (double v : values) {
      if (t == ScalarType::F32) f32.push_back(static_cast<float>(v));
      else if (t == ScalarType::BF16) half.push_back(from_float<Bf16>(static_cast<float>(v)).bits);
      else half.push_back(from_float<F16>(static_cast<float>(v)).bits);
    }
  }
  MatrixView view() { return {type == ScalarType::F32 ? static_cast<void*>(f32.data()) : static_cast<void*>(half.data()), type, rows, cols, cols, 1}; }
  double at(int64_t i, int64_t j) const {
    const size_t k = static_cast<size_t>(i * cols + j);
    if (type == ScalarType::F32) return f32[k];
    return type == ScalarType::BF16 ? to_float(Bf16{half[k]}) : to_float(F16{half[k]});
  }
};

GemmDriver make_driver(CpuIsa isa, GemmBlocking blocking) {
  return GemmDriver(isa, blocking, [](const MicrokernelSpec& spec) { return get_microkernel(spec).function; });
}

struct Case {
  int64_t m, n, k;
  bool transpose_b, with_c;
  float alpha, beta, gamma;
  ScalarType type;
};

TEST(GemmDriver, MatchesADoubleProductOnOddShapes) {
  const Case cases[] = {
      {1, 1, 1, false, false, 1, 0, 0, ScalarType::F32},         {13, 7, 300, false, true, 2.0f, -0.5f, 0, ScalarType::F32},
      {29, 29, 64, true, true, 1.5f, 0.25f, 3.0f, ScalarType::F32}, {40, 75, 1000, true, false, -1.0f, 0, 0, ScalarType::BF16},
      {64, 64, 17, false, true, 1, 1, -2.0f, ScalarType::F16},    {100, 33, 129, false, true, 0.5f, 3.0f, 0, ScalarType::BF16},
      {50, 70, 301, true, true, 1.0f, 0.5f, 0, ScalarType::F32},   // f32 transposed B with full and partial panels, odd k blocks
      {37, 70, 259, true, true, 1.0f, 0.5f, 0, ScalarType::BF16},  // bf16 pairs from a transposed B and odd rows: an odd last K block
      {26, 64, 131, false, false, 1.0f, 0, 0, ScalarType::BF16},   // bf16 pairs from a row-major B: full panels, odd last K block
      {36, 48, 250, false, true, 1.0f, -1.0f, 0.5f, ScalarType::BF16},  // even K: a bf16 A read in place on dot, whole row panels
  };
  for (bool dot : {false, true}) {  // bf16 dot products where the CPU has them (the bf16 cases)
  // Operands packed (0), and read in place with their edge panels padded (1 GiB): f32 A and B, a
  // bf16 A of even K on dot products.
  for (int64_t direct_bytes : {int64_t{0}, int64_t{1} << 30}) {
  GemmBlocking small{24, 128, 64, dot, direct_bytes};  // small blocks: several K blocks, row blocks and column blocks
  for (CpuIsa isa : supported_isas()) {
    for (const Case& test : cases) {
      SCOPED_TRACE(std::string(to_string(isa)) + (dot ? " dot " : " ") + (direct_bytes ? "direct " : "packed ") + std::to_string(test.m) + "x" + std::to_string(test.n) + "x" + std::to_string(test.k));
      Storage a(test.type, reference::gaussian_values(test.m * test.k, 1), test.m, test.k);
      Storage b(test.type, reference::gaussian_values(test.k * test.n, 2), test.transpose_b ? test.n : test.k, test.transpose_b ? test.k : test.n);
      Storage c(test.type, reference::gaussian_values(test.m * test.n, 3), test.m, test.n);
      Storage d(test.type, std::vector<double>(static_cast<size_t>(test.m * test.n), std::nan("")), test.m, test.n);  // poisoned
      GemmProblem problem;
      problem.a = a.view();
      problem.b = test.transpose_b ? b.view().transposed() : b.view();
      if (test.with_c) problem.c = c.view();
      problem.d = d.view();
      problem.alpha = test.alpha;
      problem.beta = test.beta;
      problem.gamma = (test.m == test.n) ? test.gamma : 0.0f;
      make_driver(isa, small).run(problem, &shared_thread_pool());
      // The exact product of the stored operands, in f64.
      for (int64_t i = 0; i < test.m; ++i)
        for (int64_t j = 0; j < test.n; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t k = 0; k < test.k; ++k) {
            const double product = a.at(i, k) * (test.transpose_b ? b.at(j, k) : b.at(k, j));
            sum += product;
            magnitude += std::fabs(product);
          }
          double expected = test.alpha * sum + (test.with_c ? test.beta * c.at(i, j) : 0.0) + (i == j ? problem.gamma : 0.0);
          // f32 accumulation: |error| <= K·u32·Σ|a·b| (+ the epilogue's and the store's rounding).
          const double store_unit = test.type == ScalarType::F32 ? 0x1p-24 : (test.type == ScalarType::BF16 ? 0x1p-8 : 0x1p-11);
          const double bound = std::fabs(test.alpha) * (static_cast<double>(test.k) + 2) * 0x1p-24 * magnitude +
                               store_unit * std::fabs(expected) * 1.01 + 1e-30 + 4 * 0x1p-24 * (std::fabs(test.beta * (test.with_c ? c.at(i, j) : 0)) + 1);
          const double error = std::fabs(d.at(i, j) - expected);
          ASSERT_FALSE(std::isnan(d.at(i, j))) << i << "," << j << " never written";
          ASSERT_LE(error, bound) << "at " << i << "," << j;
        }
    }
  }
  }
  }
}

TEST(GemmDriver, TriangularProductIsExactlySymmetricAndEqualsTheDenseUpperTriangle) {
  // f32 and bf16 results: the mirror moves 4x4 and 8x8 blocks below the diagonal, elements near it
  // (sizes around and between the block edges; 130 leaves remainder rows of both).
  for (ScalarType type : {ScalarType::F32, ScalarType::BF16})
  for (CpuIsa isa : supported_isas()) {
    for (int64_t m : {1, 5, 8, 17, 47, 130}) {
      SCOPED_TRACE(std::string(to_string(type)) + " " + std::string(to_string(isa)) + " m=" + std::to_string(m));
      const int64_t k = 77;
      Storage x(type, reference::gaussian_values(m * k, 9), m, k);
      Storage dense(type, std::vector<double>(static_cast<size_t>(m * m), std::nan("")), m, m);
      Storage triangular = dense;
      GemmProblem problem;
      problem.a = x.view();
      problem.b = x.view().transposed();
      problem.gamma = 0.5f;
      problem.d = dense.view();
      make_driver(isa, {24, 32, 48}).run(problem, &shared_thread_pool());
      problem.d = triangular.view();
      problem.triangular = true;
      make_driver(isa, {24, 32, 48}).run(problem, &shared_thread_pool());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j) {
          ASSERT_EQ(triangular.at(i, j), triangular.at(j, i)) << "not symmetric at " << i << "," << j;
          if (i <= j) {
            ASSERT_EQ(triangular.at(i, j), dense.at(i, j)) << "upper triangle differs at " << i << "," << j;
          }
        }
    }
  }
}

// The double-buffered stages: in every phase (stage s's products with stage s+1's packing), no
// buffer stage s reads is one the packing writes, and every stage reads the operands packed for
// it (its K block's A, its own B), for any number of K and column blocks. A race here would only
// show on a loaded machine now and then; the rule is checked exactly.
TEST(GemmDriver, PipelinedStagesNeverPackIntoABufferInUse) {
  for (int64_t k_blocks : {1, 2, 3, 7})
    for (int64_t column_blocks : {1, 2, 3, 5}) {
      SCOPED_TRACE(std::to_string(k_blocks) + " K blocks, " + std::to_string(column_blocks) + " column blocks");
      const int64_t stages = k_blocks * column_blocks;
      int64_t a_content[2] = {-1, -1}, b_content[2] = {-1, -1};  // which K block's A / which stage's B a buffer holds
      auto pack = [&](int64_t index) {
        const PipelineStage stage = pipeline_stage(index, column_blocks);
        if (stage.packs_a) a_content[stage.a_buffer] = stage.k_block;
        b_content[stage.b_buffer] = index;
      };
      pack(0);
      int64_t previous_k_block = -1;
      for (int64_t index = 0; index < stages; ++index) {
        const PipelineStage stage = pipeline_stage(index, column_blocks);
        ASSERT_EQ(stage.k_block, index / column_blocks);
        ASSERT_EQ(stage.packs_a, stage.k_block != previous_k_block) << "A is packed exactly when a K block starts";
        previous_k_block = stage.k_block;
        ASSERT_EQ(a_content[stage.a_buffer], stage.k_block) << "stage " << index << " reads another K block's A";
        ASSERT_EQ(b_content[stage.b_buffer], index) << "stage " << index << " reads another stage's B";
        if (index + 1 < stages) {
          const PipelineStage next = pipeline_stage(index + 1, column_blocks);
          if (next.packs_a) {
            ASSERT_NE(next.a_buffer, stage.a_buffer) << "stage " << index + 1 << " packs A into the buffer stage " << index << " reads";
          }
          ASSERT_NE(next.b_buffer, stage.b_buffer) << "stage " << index + 1 << " packs B into the buffer stage " << index << " reads";
          pack(index + 1);
        }
      }
    }
}

TEST(GemmDriver, TileMapSkipsOnlyTilesBelowTheDiagonal) {
  // Host test of the triangular tile map: a microtile is skipped iff all its rows are below all its columns.
  const int mr = 12, nr = 32;
  for (int64_t row0 = 0; row0 < 200; row0 += mr)
    for (int64_t col0 = 0; col0 < 200; col0 += nr) {
      bool has_upper_element = false;
      for (int64_t i = row0; i < row0 + mr; ++i)
        for (int64_t j = col0; j < col0 + nr; ++j) has_upper_element |= i <= j;
      EXPECT_EQ(microtile_needed(row0, col0, nr, true), has_upper_element) << row0 << "," << col0;
      EXPECT_TRUE(microtile_needed(row0, col0, nr, false));
    }
}

TEST(GemmDriver, ResultDoesNotDependOnThreadCountOrBlockingOfMAndN) {
  const int64_t m = 70, n = 90, k = 500;
  Storage a(ScalarType::F32, reference::gaussian_values(m * k, 4), m, k);
  Storage b(ScalarType::F32, reference::gaussian_values(k * n, 5), k, n);
  std::vector<std::vector<float>> results;
  ThreadPool three(3);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &shared_thread_pool(), &three}) {
    // Same kc, so the same sums in the same order: packed or direct operands, any M and N blocking.
    for (GemmBlocking blocking : {GemmBlocking{24, 128, 64}, GemmBlocking{96, 128, 1024}, GemmBlocking{96, 128, 1024, false, 0}}) {
      Storage d(ScalarType::F32, std::vector<double>(static_cast<size_t>(m * n), 0.0), m, n);
      GemmProblem problem{a.view(), b.view(), std::nullopt, d.view(), 1, 0, 0, false};
      make_driver(best_host_isa(), blocking).run(problem, pool);
      results.push_back(d.f32);
    }
  }
  for (const auto& result : results) EXPECT_EQ(result, results.front());
}

// A bf16 A read in place (its row pairs broadcast where they lie) must give the packed panels'
// sums bit for bit: the same pairs in the same order. Run with the dot kernel on CPUs that have it
// and with the FMA path elsewhere, where both layouts are packed and this compares a run with itself.
TEST(GemmDriver, Bf16ADirectOrPackedGivesTheSameBits) {
  const int64_t m = 61, n = 70, k = 514;  // an edge row panel (61 = 5·12 + 1), an edge column panel, two K blocks
  Storage a(ScalarType::BF16, reference::gaussian_values(m * k, 6), m, k);
  Storage b(ScalarType::BF16, reference::gaussian_values(k * n, 7), k, n);
  const CpuIsa isa = best_host_isa();
  std::vector<std::vector<uint16_t>> results;
  for (int64_t direct_bytes : {int64_t{0}, int64_t{1} << 30}) {
    const GemmBlocking blocking{24, 384, 64, true, direct_bytes};
    const OperandLayouts layouts = choose_operand_layouts(isa, blocking, a.view(), b.view());
    // Dot products read the bf16 A in place and pack B; the FMA kernels read widened copies of both.
    const bool dot = uses_bf16_dot(isa, true, a.view(), b.view());
    EXPECT_EQ(layouts.a_direct, direct_bytes > 0);
    EXPECT_EQ(layouts.b_direct, direct_bytes > 0 && !dot);
    EXPECT_EQ(layouts.a_widened, direct_bytes > 0 && !dot);
    Storage d(ScalarType::BF16, std::vector<double>(static_cast<size_t>(m * n), std::nan("")), m, n);
    GemmProblem problem{a.view(), b.view(), std::nullopt, d.view(), 1, 0, 0, false};
    make_driver(isa, blocking).run(problem, &shared_thread_pool());
    results.push_back(d.half);
  }
  EXPECT_EQ(results[0], results[1]);
  // An odd K keeps A packed (the last pair would read past the row).
  Storage odd(ScalarType::BF16, reference::gaussian_values(m * (k - 1), 8), m, k - 1);
  Storage odd_b(ScalarType::BF16, reference::gaussian_values((k - 1) * n, 9), k - 1, n);
  EXPECT_EQ(choose_operand_layouts(isa, GemmBlocking{24, 384, 64, true, int64_t{1} << 30}, odd.view(), odd_b.view()).a_direct,
            !uses_bf16_dot(isa, true, odd.view(), odd_b.view()));
}

// Small 16-bit operands on the FMA kernels are widened whole to f32 copies and read from there
// (OperandLayouts); the sums must be the packed path's bit for bit, for row-major and transposed
// operands, windows of wider storage, the shared copy of X·Xᵀ (triangular), an operand too large
// to widen beside one that is not, one thread and the pool. The packed path itself is checked
// against f64 in MatchesADoubleProductOnOddShapes.
TEST(GemmDriver, SixteenBitOperandsWidenedOrPackedGiveTheSameBits) {
  const int64_t m = 61, k = 203, n = 75, wide = 230;  // edge panels everywhere; windows of `wide` columns; B larger than A
  for (ScalarType type : {ScalarType::BF16, ScalarType::F16}) {
    Storage x(type, reference::gaussian_values(m * wide, 21), m, wide);  // A: the window (m, k) of x
    Storage y(type, reference::gaussian_values(k * wide, 22), k, wide);  // B: the window (k, n), or (n, k) transposed
    Storage c(type, reference::gaussian_values(m * m, 23), m, m);
    MatrixView a = x.view();
    a.cols = k;
    MatrixView b_rows = y.view();
    b_rows.cols = n;
    MatrixView z = y.view();  // the window (n, k) of y, whose transpose is a (k, n) B with contiguous columns
    z.rows = n;
    z.cols = k;
    const MatrixView b_columns = z.transposed();
    struct Variant {
      const char* name;
      MatrixView b;
      bool triangular;
      int64_t direct_bytes;
    };
    const Variant variants[] = {
        {"row-major B", b_rows, false, int64_t{1} << 30},
        {"transposed B", b_columns, false, int64_t{1} << 30},
        {"X times its transpose", a.transposed(), true, int64_t{1} << 30},
        {"A widened, B too large", b_rows, false, m * k * 4},
    };
    for (const Variant& variant : variants)
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &shared_thread_pool()}) {
        SCOPED_TRACE(std::string(to_string(type)) + " " + variant.name + (pool ? " pool" : " one thread"));
        const CpuIsa isa = best_host_isa() == CpuIsa::AmxBf16 ? CpuIsa::Avx512f : best_host_isa();  // the FMA kernels
        const int64_t cols = variant.b.cols;
        std::vector<std::vector<uint16_t>> results;
        for (int64_t direct_bytes : {int64_t{0}, variant.direct_bytes}) {
          const GemmBlocking blocking{24, 128, 64, false, direct_bytes};
          const OperandLayouts layouts = choose_operand_layouts(isa, blocking, a, variant.b);
          EXPECT_EQ(layouts.a_widened, direct_bytes > 0);
          EXPECT_EQ(layouts.a_direct, direct_bytes > 0);
          EXPECT_EQ(layouts.b_widened, direct_bytes > 0 && variant.direct_bytes > m * k * 4);
          EXPECT_EQ(layouts.b_direct, layouts.b_widened && variant.b.col_stride == 1);
          Storage d(type, std::vector<double>(static_cast<size_t>(m * cols), std::nan("")), m, cols);
          GemmProblem problem{a, variant.b, std::nullopt, d.view(), 1.5f, 0, 0, variant.triangular};
          if (variant.triangular) {
            problem.c = c.view();
            problem.beta = -0.5f;
            problem.gamma = 2.0f;
          }
          make_driver(isa, blocking).run(problem, pool);
          results.push_back(d.half);
        }
        EXPECT_EQ(results[0], results[1]);
      }
    // A column vector X: its Xᵀ has unit strides both ways, so it gets a copy of its own (a row).
    Storage v(type, reference::gaussian_values(m, 24), m, 1);
    std::vector<std::vector<uint16_t>> results;
    for (int64_t direct_bytes : {int64_t{0}, int64_t{1} << 30}) {
      Storage d(type, std::vector<double>(static_cast<size_t>(m * m), std::nan("")), m, m);
      GemmProblem problem{v.view(), v.view().transposed(), std::nullopt, d.view(), 1, 0, 0, true};
      make_driver(best_host_isa() == CpuIsa::AmxBf16 ? CpuIsa::Avx512f : best_host_isa(), GemmBlocking{24, 128, 64, false, direct_bytes})
          .run(problem, &shared_thread_pool());
      results.push_back(d.half);
    }
    EXPECT_EQ(results[0], results[1]) << to_string(type) << " column vector";
    // A·A, one copy read as both operands, into a window of wider storage.
    Storage square(type, reference::gaussian_values(m * wide, 25), m, wide);
    MatrixView s = square.view();
    s.cols = m;
    std::vector<std::vector<uint16_t>> squares;
    for (int64_t direct_bytes : {int64_t{0}, int64_t{1} << 30}) {
      Storage d(type, std::vector<double>(static_cast<size_t>(m * m), std::nan("")), m, m);
      GemmProblem problem{s, s, std::nullopt, d.view(), 1, 0, 0, false};
      make_driver(best_host_isa() == CpuIsa::AmxBf16 ? CpuIsa::Avx512f : best_host_isa(), GemmBlocking{24, 128, 64, false, direct_bytes})
          .run(problem, &shared_thread_pool());
      squares.push_back(d.half);
    }
    EXPECT_EQ(squares[0], squares[1]) << to_string(type) << " A times A";
  }
}

}  // namespace
}  // namespace orthojit::cpu
