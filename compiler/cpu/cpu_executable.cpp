// CPU backend execution of scheduled IR.
#include "cpu/cpu_executable.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <utility>

#include "cpu/aligned_buffer.h"
#include "cpu/amx_self_check.h"
#include "ir/norm_scale.h"
#include "cpu/build_status.h"
#include "cpu/element_types.h"
#include "cpu/kernel_cache.h"
#include "support/host_clones.h"
#include "support/host_cpu.h"
#include "support/rounding.h"

namespace orthojit::cpu {
namespace {

// One row of a view, converted to f32, added with weight `coefficient` into `row`.
template <typename T>
ORTHOJIT_HOST_CLONES void accumulate_row(const MatrixView& view, int64_t i, float coefficient, float* row) {
  const T* base = static_cast<const T*>(view.data) + i * view.row_stride;
  if (view.col_stride == 1) {  // the common case, written out so that it vectorizes
    for (int64_t j = 0; j < view.cols; ++j) row[j] += coefficient * to_float(base[j]);
    return;
  }
  for (int64_t j = 0; j < view.cols; ++j) row[j] += coefficient * to_float(base[j * view.col_stride]);
}

// row = 0 + v for the view's row i: what a zeroed row accumulating 1·v holds (so -0 becomes +0
// there as well), without the zeroing pass.
template <typename T>
ORTHOJIT_HOST_CLONES void load_row(const MatrixView& view, int64_t i, float* row) {
  const T* base = static_cast<const T*>(view.data) + i * view.row_stride;
  if (view.col_stride == 1) {
    for (int64_t j = 0; j < view.cols; ++j) row[j] = 0.0f + to_float(base[j]);
    return;
  }
  for (int64_t j = 0; j < view.cols; ++j) row[j] = 0.0f + to_float(base[j * view.col_stride]);
}

template <typename T>
ORTHOJIT_HOST_CLONES void store_row(const MatrixView& view, int64_t i, const float* row) {
  T* base = static_cast<T*>(view.data) + i * view.row_stride;
  if (view.col_stride == 1) {
    for (int64_t j = 0; j < view.cols; ++j) base[j] = from_float<T>(row[j]);
    return;
  }
  for (int64_t j = 0; j < view.cols; ++j) base[j * view.col_stride] = from_float<T>(row[j]);
}

// Σ v² over the rows of one block (kNormBlockRows, below) handed in order: in f64 one running sum,
// in f32 16 independent partial sums, lane = column mod 16 (vectorizable; the order depends only
// on the shape, so it is deterministic). The normalize of a Muon step hands it the rows of U as it
// computes them, in the blocks an orthogonalizer's normalize reads its input in, so both give the
// same norm. The values are scaled by `scale` (a power of two, ir/norm_scale.h) before they are squared.
class SquareSum {
 public:
  SquareSum(bool in_f64, float scale) : in_f64_(in_f64), scale_(scale) {}
  ORTHOJIT_HOST_CLONES void add_row(const float* row, int64_t cols) {
    if (in_f64_) {
      for (int64_t j = 0; j < cols; ++j) {
        const double v = row[j] * scale_;
        sum_ += v * v;
      }
      return;
    }
    // The lanes in locals (registers), not through `this`, which the compiler must assume `row`
    // may alias: only then is the 16-lane loop one vector multiply-add per 16 values.
    float lanes[16];
    std::memcpy(lanes, lanes_, sizeof lanes);
    const float scale = scale_;
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16)
      for (int l = 0; l < 16; ++l) {
        const float v = row[j + l] * scale;
        lanes[l] += v * v;
      }
    for (; j < cols; ++j) {
      const float v = row[j] * scale;
      lanes[j % 16] += v * v;
    }
    std::memcpy(lanes_, lanes, sizeof lanes);
  }
  double total() const {
    if (in_f64_) return sum_;
    float sum = 0;
    for (float lane : lanes_) sum += lane;
    return sum;
  }

 private:
  bool in_f64_;
  float scale_;
  double sum_ = 0;
  float lanes_[16] = {};
};

// The norm's two reductions (the largest |v|, for its power-of-two scale, then Σ (v·scale)²) run
// over blocks of kNormBlockRows rows spread over the pool. Each block's partial result is its own
// and the partials are combined in block order, so the norm depends on the shape only, not on the
// thread count or the split; the fused Muon step's normalize uses the same blocks, so it gives the
// norm an orthogonalizer's normalize gives for the same U.
constexpr int64_t kNormBlockRows = 16;

// Runs block(begin, end, row) for every block of rows (row: a scratch row of `cols` f32) and
// returns the partials in block order.
template <typename Partial, typename Block>
std::vector<Partial> row_block_partials(ThreadPool* pool, int64_t rows, int64_t cols, const Block& block) {
  const int64_t blocks = (rows + kNormBlockRows - 1) / kNormBlockRows;
  std::vector<Partial> partials(static_cast<size_t>(blocks));
  auto run = [&](int64_t b, int) {
    std::vector<float> row(static_cast<size_t>(cols));
    partials[static_cast<size_t>(b)] = block(b * kNormBlockRows, std::min(rows, (b + 1) * kNormBlockRows), row.data());
  };
  if (pool && blocks > 1) pool->parallel_for(blocks, run);
  else
    for (int64_t b = 0; b < blocks; ++b) run(b, 0);
  return partials;
}

// row = row·scale / denominator, element by element (a division, not a reciprocal: the rounding
// the norm's definition gives).
ORTHOJIT_HOST_CLONES void scale_and_divide_row(float* row, int64_t cols, float scale, float denominator) {
  for (int64_t j = 0; j < cols; ++j) row[j] = row[j] * scale / denominator;
}

// |v| as its bits: for every float, NaN included, |a| < |b| exactly when bits(|a|) < bits(|b|) as
// integers, and a NaN's bits are above +inf's. So the largest magnitude (or "there is a NaN") is
// one integer max, which vectorizes without a branch per value.
inline int32_t magnitude_bits(float value) { return static_cast<int32_t>(std::bit_cast<uint32_t>(value) & 0x7fffffffu); }
inline int32_t magnitude_bits(Bf16 value) { return static_cast<int32_t>((static_cast<uint32_t>(value.bits) << 16) & 0x7fffffffu); }
inline int32_t magnitude_bits(F16 value) { return magnitude_bits(to_float(value)); }
constexpr int32_t kInfinityBits = 0x7f800000;
inline double magnitude_from_bits(int32_t bits) { return bits > kInfinityBits ? NAN : static_cast<double>(std::bit_cast<float>(bits)); }

template <typename T>
ORTHOJIT_HOST_CLONES int32_t largest_magnitude_bits(const MatrixView& view, int64_t begin, int64_t end) {
  int32_t largest = 0;
  for (int64_t i = begin; i < end; ++i) {
    const T* base = static_cast<const T*>(view.data) + i * view.row_stride;
    if (view.col_stride == 1)
      for (int64_t j = 0; j < view.cols; ++j) largest = std::max(largest, magnitude_bits(base[j]));
    else
      for (int64_t j = 0; j < view.cols; ++j) largest = std::max(largest, magnitude_bits(base[j * view.col_stride]));
  }
  return largest;
}

// The largest |v| of a view (NaN when one is NaN), for the norm's scale.
template <typename T>
double largest_magnitude(const MatrixView& view, ThreadPool* pool) {
  int32_t largest = 0;
  for (int32_t bits : row_block_partials<int32_t>(pool, view.rows, view.cols, [&](int64_t begin, int64_t end, float*) { return largest_magnitude_bits<T>(view, begin, end); }))
    largest = std::max(largest, bits);
  return magnitude_from_bits(largest);
}

// Block partials of Σ (v·scale)² summed in block order: in f64, or in f32 as a norm in f32 is.
double combine_square_sums(const std::vector<double>& partials, bool in_f64) {
  double total = 0;
  float total_f32 = 0;
  for (double partial : partials) {
    total += partial;
    total_f32 += static_cast<float>(partial);
  }
  return in_f64 ? total : total_f32;
}

// Σ (v·scale)² of the rows fill_row(i, row) writes, in the norm's blocks, combined in block order.
template <typename FillRow>
double blocked_square_sum(ThreadPool* pool, int64_t rows, int64_t cols, bool in_f64, float scale, const FillRow& fill_row) {
  return combine_square_sums(row_block_partials<double>(pool, rows, cols,
                                                        [&](int64_t begin, int64_t end, float* row) {
                                                          SquareSum sum(in_f64, scale);
                                                          for (int64_t i = begin; i < end; ++i) {
                                                            fill_row(i, row);
                                                            sum.add_row(row, cols);
                                                          }
                                                          return sum.total();
                                                        }),
                             in_f64);
}

template <typename T>
double sum_of_squares(const MatrixView& view, bool in_f64, float scale, ThreadPool* pool) {
  return blocked_square_sum(pool, view.rows, view.cols, in_f64, scale, [&](int64_t i, float* row) {
    load_row<T>(view, i, row);
  });
}

// The denominator of a normalize from the sum of squares of the values times `scale`, in the
// norm type: ‖x·s‖·safety + eps·s (or the max of the two), the unscaled one times s.
float normalize_denominator(const ir::Node& node, double squares, float scale) {
  if (node.norm_type == ScalarType::F64) {
    const double norm = std::sqrt(squares) * node.normalization.safety, eps = node.normalization.eps * scale;
    return static_cast<float>(node.normalization.mode == dsl::Normalization::Mode::Add ? norm + eps : std::max(norm, eps));
  }
  const float norm = std::sqrt(static_cast<float>(squares)) * static_cast<float>(node.normalization.safety);
  const float eps = static_cast<float>(node.normalization.eps) * scale;
  return node.normalization.mode == dsl::Normalization::Mode::Add ? norm + eps : std::max(norm, eps);
}

// AOL's row scales (dsl::Normalization::Kind::Aol) of y (rows x cols, row-major, the values times
// `scale`), as the reference interpreter computes them: d_i = Σ_j |Σ_k y_ik·y_jk| in f64 rounded to
// the norm type, s_i = 1/√max(d_i, eps·scale²) rounded to the norm type. Each row's sums are its
// own, in the interpreter's order, so neither the thread count nor the split changes them.
std::vector<float> aol_row_scales(const ir::Node& node, const std::vector<float>& y, int64_t rows, int64_t cols, float scale, ThreadPool* pool) {
  std::vector<float> scales(static_cast<size_t>(rows));
  const double floor = round_to(node.norm_type, node.normalization.eps) * scale * scale;
  auto row_scale = [&](int64_t i, int) {
    const float* yi = y.data() + i * cols;
    double row_sum = 0;
    for (int64_t j = 0; j < rows; ++j) {
      const float* yj = y.data() + j * cols;
      double dot = 0;
      for (int64_t k = 0; k < cols; ++k) dot += static_cast<double>(yi[k]) * static_cast<double>(yj[k]);
      row_sum += std::fabs(dot);
    }
    const double d = round_to(node.norm_type, row_sum);
    scales[static_cast<size_t>(i)] = static_cast<float>(round_to(node.norm_type, 1.0 / std::sqrt(std::max(d, floor))));
  };
  if (pool) pool->parallel_for(rows, row_scale);
  else
    for (int64_t i = 0; i < rows; ++i) row_scale(i, 0);
  return scales;
}

// Runs body(i, row) for every row i in [0, rows), in chunks spread over the pool (or on this thread),
// each chunk with its own f32 row buffer of `cols` values. Rows are independent: the result does
// not depend on the split.
void for_each_row(ThreadPool* pool, int64_t rows, int64_t cols, const std::function<void(int64_t, float*)>& body) {
  const int workers = pool ? pool->size() : 1;
  const int64_t chunk = std::max<int64_t>(8, (rows + 4 * workers - 1) / (4 * workers));
  auto run_chunk = [&](int64_t task, int) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t i = task * chunk; i < std::min(rows, (task + 1) * chunk); ++i) body(i, row.data());
  };
  const int64_t tasks = (rows + chunk - 1) / chunk;
  if (pool) pool->parallel_for(tasks, run_chunk);
  else
    for (int64_t task = 0; task < tasks; ++task) run_chunk(task, 0);
}

// Template body of load_transposed_block: rows [i0, i0 + count) of a transposed view (its
// columns are contiguous in memory) into `block`, row r at block + r·stride, as load_row gives them.
template <typename T>
ORTHOJIT_HOST_CLONES void load_transposed_block(const MatrixView& view, int64_t i0, int64_t count, float* block, int64_t stride) {
  const T* const data = static_cast<const T*>(view.data);
  for (int64_t j = 0; j < view.cols; ++j) {
    const T* const run = data + j * view.col_stride + i0;  // the view's column j, rows i0.. : contiguous
    for (int64_t r = 0; r < count; ++r) block[r * stride + j] = 0.0f + to_float(run[r]);
  }
}

// Runs body(i, row) for every row of `view`, loaded as f32 (the values load_row gives), spread over
// the pool. A transposed view (row_stride 1: a tall matrix's result read through its transpose)
// is loaded in blocks of 32 rows: each of the view's columns gives one contiguous run of 32 values
// (a cache line of bf16), so every line is read once and used whole. Row by row, the 1024 lines a
// 4096x1024 bf16 row touches lie 8 KiB apart, all in the same L1 sets, and were fetched again
// from L2 for the next row: 12.0 ms against 4.9 for the same update of the wide parameter
// (bench/RESULTS.md, fifteenth session). The block's row stride is padded by 64 bytes so that its
// 32 rows, written column by column, do not alias in L1 either.
void for_each_loaded_row(ThreadPool* pool, const MatrixView& view, const std::function<void(int64_t, float*)>& body) {
  const int64_t rows = view.rows, cols = view.cols;
  if (view.row_stride != 1 || view.col_stride == 1 || rows < 2) {
    for_each_row(pool, rows, cols, [&](int64_t i, float* row) {
      dispatch_storage_type(view.type, [&](auto tag) { load_row<decltype(tag)>(view, i, row); });
      body(i, row);
    });
    return;
  }
  constexpr int64_t kBlockRows = 32;
  const int64_t stride = cols + 16;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  auto run_block = [&](int64_t b, int) {
    std::vector<float> block(static_cast<size_t>(kBlockRows * stride));
    const int64_t i0 = b * kBlockRows, count = std::min(kBlockRows, rows - i0);
    dispatch_storage_type(view.type, [&](auto tag) { load_transposed_block<decltype(tag)>(view, i0, count, block.data(), stride); });
    for (int64_t r = 0; r < count; ++r) body(i0 + r, block.data() + r * stride);
  };
  if (pool && blocks > 1) pool->parallel_for(blocks, run_block);
  else
    for (int64_t b = 0; b < blocks; ++b) run_block(b, 0);
}

// The normalize's last two passes over rows that fill_row(i, row) supplies (the same values both
// times): Σ (v·scale)² in the norm's blocks, then each row scaled, divided and stored to `out`.
template <typename FillRow>
void divide_rows_by_norm(ThreadPool* pool, const ir::Node& node, const MatrixView& out, int64_t rows, int64_t cols, bool in_f64, float scale,
                         const FillRow& fill_row) {
  const double squares = blocked_square_sum(pool, rows, cols, in_f64, scale, fill_row);
  const float denominator = normalize_denominator(node, squares, scale);
  for_each_row(pool, rows, cols, [&](int64_t i, float* values) {
    fill_row(i, values);
    scale_and_divide_row(values, cols, scale, denominator);
    dispatch_storage_type(out.type, [&](auto tag) { store_row<decltype(tag)>(out, i, values); });
  });
}

// The view of every node without data: its type, shape and strides as run_one makes them (planned
// buffers and the input are row-major; a transpose swaps the strides of its operand's view).
std::vector<MatrixView> static_views(const ir::Function& function) {
  std::vector<MatrixView> views(function.nodes.size());
  for (size_t index = 0; index < function.nodes.size(); ++index) {
    const ir::Node& node = function.nodes[index];
    const int64_t rows = node.shape.rows.size, cols = node.shape.cols.size;
    views[index] = node.kind == ir::OpKind::Transpose ? views[static_cast<size_t>(node.operands[0])].transposed()
                                                       : MatrixView{nullptr, node.kind == ir::OpKind::Input && !function.muon_step ? ScalarType::F32 : node.type, rows, cols, cols, 1};
  }
  return views;
}

}  // namespace

std::string CpuOptions::describe() const {
  if (engine == ProductEngine::OpenBlas) return std::string("openblas ") + openblas_kernel_name() + " threads=" + std::to_string(threads);
  if (engine == ProductEngine::OneDnn) return "onednn (" + onednn_description() + ") threads=" + std::to_string(threads);
  return std::string(to_string(isa)) + " threads=" + std::to_string(threads) + " mc=" + std::to_string(blocking.mc) +
         " kc=" + std::to_string(blocking.kc) + " nc=" + std::to_string(blocking.nc) + (blocking.bf16_dot ? " bf16dot" : "") +
         (blocking.direct_operand_bytes != GemmBlocking{}.direct_operand_bytes ? " direct=" + std::to_string(blocking.direct_operand_bytes) : "") +
         (blocking.b_prefetch != GemmBlocking{}.b_prefetch ? " prefetch=" + std::to_string(blocking.b_prefetch) : "");
}

CpuExecutable::CpuExecutable(const ir::Function& scheduled, const CpuOptions& options) : function_(scheduled), options_(options) {
  // A build without LLVM has no kernels to compile (cpu/without_llvm.cpp): say so before anything.
  if (!cpu_backend_unavailable_reason().empty()) throw PartNotBuilt(cpu_backend_unavailable_reason());
  if (function_.buffers.empty() && function_.nodes.size() > 2)
    throw std::invalid_argument("cpu backend: the IR has no buffer plan (run every pass first)");
  for (const auto& node : function_.nodes) {
    const bool element_wise_f64 = node.kind == ir::OpKind::Momentum || node.kind == ir::OpKind::Update;  // f64 arithmetic by definition
    if (node.type == ScalarType::F64 || (node.accumulate == ScalarType::F64 && !element_wise_f64))
      throw std::invalid_argument("the cpu backend runs bf16, f16 and f32 policies; f64 is the reference backend's (--backend ref)");
    if (node.kind == ir::OpKind::Momentum && !node.fused)
      throw std::invalid_argument("cpu backend: a Muon step's momentum must be fused into its normalize (run fuse_update_rules)");
    if (node.kind == ir::OpKind::Update && node.fused)
      throw std::invalid_argument("cpu backend: the Muon update runs as its own pass here (compile with fuse_update = false)");
  }
  if (!host_supports(options_.isa))
    throw std::invalid_argument("this CPU cannot run the " + std::string(to_string(options_.isa)) + " code path");
  // f16 products on the tiles where the CPU has AMX-FP16 (the amx path is usable, so its
  // permission is granted; AMX-FP16 needs no other) and its kernels passed the self-check.
  options_.blocking.amx_fp16 = options_.isa == CpuIsa::AmxBf16 && amx_fp16_usable();
  driver_ = std::make_unique<GemmDriver>(options_.isa, options_.blocking, [this](const MicrokernelSpec& wanted) -> MicrokernelFunction {
    const std::string name = wanted.name();
    const auto found = kernel_by_name_.find(name);
    if (found != kernel_by_name_.end()) return found->second;
    throw std::logic_error("cpu backend: no microkernel compiled for " + name);
  });
  // The microkernels the products need (K-block lengths, operand modes), compiled now: the views
  // of every node have the shapes and strides run_one will give them.
  const std::vector<MatrixView> views = static_views(function_);
  for (const auto& node : function_.nodes) {
    if (node.kind != ir::OpKind::Gemm || options_.engine != ProductEngine::Jit) continue;
    const MatrixView& a = views[static_cast<size_t>(node.operands[0])];
    const MatrixView& b = views[static_cast<size_t>(node.operands[1])];
    for (const MicrokernelSpec& spec : microkernels_for(options_.isa, driver_->blocking(), a, b)) {
      if (!kernel_by_name_.contains(spec.name())) {
        const CompiledMicrokernel compiled = get_microkernel(spec);
        jit_seconds_ += compiled.jit_seconds;
        kernel_specs_.push_back(spec);
        kernel_by_name_.emplace(spec.name(), compiled.function);
      }
    }
  }
  // Each product's epilogue, specialized to its α, β, γ and types.
  node_epilogues_.assign(function_.nodes.size(), nullptr);
  for (size_t index = 0; index < function_.nodes.size(); ++index) {
    const ir::Node& node = function_.nodes[index];
    if (node.kind != ir::OpKind::Gemm || options_.engine != ProductEngine::Jit) continue;
    EpilogueSpec spec;
    spec.isa = options_.isa;
    spec.alpha = static_cast<float>(node.alpha);
    spec.beta = static_cast<float>(node.beta);
    spec.gamma = static_cast<float>(node.gamma);
    spec.has_c = node.operands.size() == 3;
    if (spec.has_c) spec.c_type = function_.node(node.operands[2]).type;
    spec.d_type = node.type;
    const CompiledEpilogue compiled = get_epilogue(spec);
    jit_seconds_ += compiled.jit_seconds;
    node_epilogues_[index] = compiled.function;
    const bool known = std::any_of(epilogue_specs_.begin(), epilogue_specs_.end(), [&](const EpilogueSpec& other) { return other.name() == spec.name(); });
    if (!known) epilogue_specs_.push_back(spec);
  }
  for (const auto& buffer : function_.buffers) workspace_bytes_ += static_cast<size_t>(buffer.elements * size_in_bytes(buffer.type));
  if (options_.threads == 0) pool_ = &shared_thread_pool();
  else if (options_.threads > 1) {
    own_pool_ = std::make_unique<ThreadPool>(options_.threads);
    pool_ = own_pool_.get();
  }
}

CpuExecutable::~CpuExecutable() = default;

std::vector<EpilogueSpec> CpuExecutable::epilogues() const { return epilogue_specs_; }

std::vector<MicrokernelSpec> CpuExecutable::microkernels() const { return kernel_specs_; }

int64_t CpuExecutable::matrices_one_per_worker() const {
  if (!pool_ || options_.engine != ProductEngine::Jit) return 0;  // a vendor library threads its own calls
  const int64_t workers = pool_->size();
  if (function_.batch < workers) return 0;
  // Each worker keeps its own planned buffers (run_one): one matrix per worker costs that many
  // sets at once. Past the cap (large matrices on many cores), products split across the workers
  // instead, which for large matrices is about as fast (bench/RESULTS.md, twenty-seventh session).
  if (static_cast<double>(workers) * static_cast<double>(workspace_bytes_) > kOnePerWorkerWorkspaceCap) return 0;
  return function_.batch / workers * workers;
}

void CpuExecutable::for_each_matrix(const std::function<void(int64_t item, ThreadPool* pool)>& body) const {
  // Whole rounds of one matrix per worker (each product on one thread: no barrier inside a
  // product, which for small matrices costs more than the arithmetic), then the matrices left
  // over one after another, each product split across every worker, so no worker idles through a
  // last, partial round. A matrix's bits do not depend on which way it ran: products split along
  // rows and columns, never along k.
  const int64_t whole_rounds = matrices_one_per_worker();
  if (whole_rounds > 0) pool_->parallel_for(whole_rounds, [&](int64_t item, int) { body(item, nullptr); });
  for (int64_t item = whole_rounds; item < function_.batch; ++item) body(item, pool_);
}

void CpuExecutable::run(const float* input, float* output) const {
  if (function_.muon_step) throw std::invalid_argument("this executable is a Muon step: run it with run_muon_step");
  const int64_t per_matrix = function_.input_shape.elements();
  for_each_matrix([&](int64_t item, ThreadPool* pool) { run_one(input + item * per_matrix, output + item * per_matrix, pool); });
}

void CpuExecutable::run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices) const {
  if (!function_.muon_step) throw std::invalid_argument("run_muon_step: this executable is an orthogonalizer, not a Muon step");
  if (static_cast<int64_t>(matrices.size()) != function_.batch)
    throw std::invalid_argument("run_muon_step: " + std::to_string(matrices.size()) + " matrices for a step compiled for " + std::to_string(function_.batch));
  for_each_matrix([&](int64_t item, ThreadPool* pool) { run_one(nullptr, nullptr, pool, &matrices[static_cast<size_t>(item)]); });
}

void CpuExecutable::run_one(const float* input, float* output, ThreadPool* pool, const ir::MuonStepMatrix* io) const {
  // The planned buffers, kept per thread from run to run (grow-only): allocating and faulting in
  // tens of MiB per call would cost more than the products of a small matrix.
  thread_local std::vector<AlignedBuffer> buffers;
  if (buffers.size() < function_.buffers.size()) buffers.resize(function_.buffers.size());
  std::vector<void*> storage;
  for (size_t b = 0; b < function_.buffers.size(); ++b)
    storage.push_back(buffers[b].get(static_cast<size_t>(function_.buffers[b].elements * size_in_bytes(function_.buffers[b].type))));
  std::vector<MatrixView> views(function_.nodes.size());
  // ORTHOJIT_PROFILE=1: time of every op, printed to stderr after the run (where the time goes).
  static const bool profile = std::getenv("ORTHOJIT_PROFILE") != nullptr;
  for (size_t index = 0; index < function_.nodes.size(); ++index) {
    const ir::Node& node = function_.nodes[index];
    const auto started = std::chrono::steady_clock::now();
    struct Report {
      bool on;
      size_t index;
      const ir::Node& node;
      std::chrono::steady_clock::time_point started;
      ~Report() {
        if (!on || node.kind == ir::OpKind::Transpose || node.kind == ir::OpKind::Input) return;
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        std::fprintf(stderr, "[profile] %%%zu %-9s %-14s %s%s %8.3f ms\n", index, ir::to_string(node.kind), node.name.c_str(),
                     node.shape.to_string().c_str(), node.symmetric ? " sym" : "", ms);
      }
    } report{profile, index, node, started};
    const int64_t rows = node.shape.rows.size, cols = node.shape.cols.size;
    auto operand = [&](size_t k) -> const MatrixView& { return views[static_cast<size_t>(node.operands[k])]; };
    MatrixView& out = views[index];
    if (node.buffer >= 0) out = {storage[static_cast<size_t>(node.buffer)], node.type, rows, cols, cols, 1};
    switch (node.kind) {
      case ir::OpKind::Input:
        out = io ? MatrixView{reinterpret_cast<void*>(io->grad), node.type, rows, cols, cols, 1} : MatrixView{const_cast<float*>(input), ScalarType::F32, rows, cols, cols, 1};
        break;
      case ir::OpKind::Momentum: out = operand(0); break;  // fused: its normalize reads g (and M, laid out like g) through this view
      case ir::OpKind::Update: {
        const MatrixView& x = operand(0);
        ir::with_stored_type(node.type, [&](auto stored) {
          constexpr ScalarType T = decltype(stored)::value;  // the parameter's type, once per step (ir::load_stored_as)
          for_each_loaded_row(pool, x, [&](int64_t i, float* row) {
            void* param = reinterpret_cast<void*>(io->param);
            for (int64_t j = 0; j < cols; ++j) {
              const int64_t at = i * cols + j;
              ir::store_rounded_as<T>(param, at, ir::muon_parameter_next(ir::load_stored_as<T>(param, at), io->decay, io->step, row[j]));
            }
          });
        });
        break;
      }
      case ir::OpKind::Transpose: out = operand(0).transposed(); break;
      case ir::OpKind::Normalize: {
        const MatrixView& source = operand(0);
        const bool in_f64 = node.norm_type == ScalarType::F64;
        if (function_.node(node.operands[0]).kind == ir::OpKind::Momentum) {
          // The fused Muon momentum: the first pass computes M (written back) and U row by row in
          // the order the norm reads them; the second recomputes U from g and the new M.
          const ir::MuonStepSpec& spec = *function_.muon_step;
          float* state = reinterpret_cast<float*>(io->momentum);
          auto gradient = [&](int64_t i, float* row) {
            dispatch_storage_type(source.type, [&](auto tag) { load_row<decltype(tag)>(source, i, row); });
          };
          if (source.col_stride != 1 && node.normalization.kind != dsl::Normalization::Kind::Aol) {
            // A tall matrix, normalized transposed (the iteration runs on its wide side): the
            // rows this normalize reads are the gradient's and the momentum's columns. Column
            // walks of g and M in each of the three passes below cost 3x the wide case (0.92
            // against 0.30 ms for a 896x256 f32 step), so here one pass walks them in memory
            // order (16 rows at a time), updates M, takes the largest |U| (a max: any order) and
            // writes U transposed into a buffer whose rows are the normalize's; the norm and the
            // output then read that buffer's rows. The same U values in the same norm order as the
            // passes below: the same bits.
            const MatrixView physical = source.transposed();  // rows: the normalize's columns
            const int64_t physical_rows = physical.rows, physical_cols = physical.cols;  // = cols, rows
            std::vector<float> u(static_cast<size_t>(rows * cols));
            constexpr int64_t kTile = 16;
            const int64_t tiles = (physical_rows + kTile - 1) / kTile;
            std::vector<int32_t> tile_largest(static_cast<size_t>(tiles), 0);
            auto run_tile = [&](int64_t t, int) {
              const int64_t r0 = t * kTile, r1 = std::min(physical_rows, r0 + kTile);
              std::vector<float> block(static_cast<size_t>(kTile * physical_cols));
              int32_t largest = 0;
              for (int64_t r = r0; r < r1; ++r) {
                float* values = block.data() + (r - r0) * physical_cols;
                dispatch_storage_type(physical.type, [&](auto tag) { load_row<decltype(tag)>(physical, r, values); });
                float* m_row = state + r * physical.row_stride;
                for (int64_t c = 0; c < physical_cols; ++c) {
                  m_row[c] = ir::muon_momentum_next(spec.ema, io->beta, values[c], m_row[c]);
                  values[c] = ir::muon_update_value(spec.ema, spec.nesterov, io->beta, values[c], m_row[c]);
                  largest = std::max(largest, magnitude_bits(values[c]));
                }
              }
              for (int64_t c = 0; c < physical_cols; ++c)  // u row c, columns r0..r1: contiguous
                for (int64_t r = r0; r < r1; ++r) u[static_cast<size_t>(c * cols + r)] = block[static_cast<size_t>((r - r0) * physical_cols + c)];
              tile_largest[static_cast<size_t>(t)] = largest;
            };
            if (pool && tiles > 1) pool->parallel_for(tiles, run_tile);
            else
              for (int64_t t = 0; t < tiles; ++t) run_tile(t, 0);
            const int32_t largest_bits = *std::max_element(tile_largest.begin(), tile_largest.end());
            const float scale = static_cast<float>(ir::norm_scale(magnitude_from_bits(largest_bits)));
            divide_rows_by_norm(pool, node, out, rows, cols, in_f64, scale, [&](int64_t i, float* values) {
              std::memcpy(values, u.data() + i * cols, static_cast<size_t>(cols) * sizeof(float));
            });
            break;
          }
          // Three passes: M (written back) and the largest |U|; the scaled Σ U² in the blocks of
          // an orthogonalizer's normalize; U recomputed, divided and stored. Each element's M is
          // its own, so the first two passes split over the pool as the norm's blocks do.
          int32_t largest_bits = 0;
          for (int32_t bits : row_block_partials<int32_t>(pool, rows, cols, [&](int64_t begin, int64_t end, float* values) {
                 int32_t block_largest = 0;
                 for (int64_t i = begin; i < end; ++i) {
                   gradient(i, values);
                   for (int64_t j = 0; j < cols; ++j) {
                     float& m = state[i * source.row_stride + j * source.col_stride];
                     m = ir::muon_momentum_next(spec.ema, io->beta, values[j], m);
                     block_largest = std::max(block_largest, magnitude_bits(ir::muon_update_value(spec.ema, spec.nesterov, io->beta, values[j], m)));
                   }
                 }
                 return block_largest;
               }))
            largest_bits = std::max(largest_bits, bits);
          const double largest = magnitude_from_bits(largest_bits);
          const float scale = static_cast<float>(ir::norm_scale(largest));
          auto update_row = [&](int64_t i, float* values) {
            gradient(i, values);
            for (int64_t j = 0; j < cols; ++j)
              values[j] = ir::muon_update_value(spec.ema, spec.nesterov, io->beta, values[j], state[i * source.row_stride + j * source.col_stride]);
          };
          if (node.normalization.kind == dsl::Normalization::Kind::Aol) {
            std::vector<float> y(static_cast<size_t>(rows * cols));
            for (int64_t i = 0; i < rows; ++i) {
              update_row(i, y.data() + i * cols);
              for (int64_t j = 0; j < cols; ++j) y[static_cast<size_t>(i * cols + j)] *= scale;
            }
            const std::vector<float> s = aol_row_scales(node, y, rows, cols, scale, pool);
            for_each_row(pool, rows, cols, [&](int64_t i, float* values) {
              for (int64_t j = 0; j < cols; ++j) values[j] = y[static_cast<size_t>(i * cols + j)] * s[static_cast<size_t>(i)];
              dispatch_storage_type(out.type, [&](auto tag) { store_row<decltype(tag)>(out, i, values); });
            });
            break;
          }
          divide_rows_by_norm(pool, node, out, rows, cols, in_f64, scale, update_row);
          break;
        }
        double squares = 0, largest = 0;
        dispatch_storage_type(source.type, [&](auto tag) { largest = largest_magnitude<decltype(tag)>(source, pool); });
        const float scale = static_cast<float>(ir::norm_scale(largest));
        if (node.normalization.kind == dsl::Normalization::Kind::Aol) {
          std::vector<float> y(static_cast<size_t>(rows * cols));
          for_each_row(pool, rows, cols, [&](int64_t i, float* row) {
            dispatch_storage_type(source.type, [&](auto tag) { load_row<decltype(tag)>(source, i, row); });
            for (int64_t j = 0; j < cols; ++j) y[static_cast<size_t>(i * cols + j)] = row[j] * scale;
          });
          const std::vector<float> s = aol_row_scales(node, y, rows, cols, scale, pool);
          for_each_row(pool, rows, cols, [&](int64_t i, float* row) {
            for (int64_t j = 0; j < cols; ++j) row[j] = y[static_cast<size_t>(i * cols + j)] * s[static_cast<size_t>(i)];  // in f32, before the cast
            dispatch_storage_type(out.type, [&](auto tag) { store_row<decltype(tag)>(out, i, row); });
          });
          break;
        }
        dispatch_storage_type(source.type, [&](auto tag) { squares = sum_of_squares<decltype(tag)>(source, in_f64, scale, pool); });
        const float denominator = normalize_denominator(node, squares, scale);
        for_each_row(pool, rows, cols, [&](int64_t i, float* row) {
          dispatch_storage_type(source.type, [&](auto tag) { load_row<decltype(tag)>(source, i, row); });
          scale_and_divide_row(row, cols, scale, denominator);  // in f32, before the cast to storage
          dispatch_storage_type(out.type, [&](auto tag) { store_row<decltype(tag)>(out, i, row); });
        });
        break;
      }
      case ir::OpKind::Gemm: {
        GemmProblem problem;
        problem.a = operand(0);
        problem.b = operand(1);
        if (node.operands.size() == 3) problem.c = operand(2);
        problem.d = out;
        problem.alpha = static_cast<float>(node.alpha);
        problem.beta = static_cast<float>(node.beta);
        problem.gamma = static_cast<float>(node.gamma);
        problem.triangular = node.symmetric && function_.strategy.triangular_products;
        problem.epilogue = node_epilogues_[index];
        if (options_.engine == ProductEngine::OpenBlas) run_openblas_product(problem, pool);
        else if (options_.engine == ProductEngine::OneDnn) run_onednn_product(problem, pool);
        else driver_->run(problem, pool);
        break;
      }
      case ir::OpKind::LinComb: {
        for_each_row(pool, rows, cols, [&](int64_t i, float* row) {
          std::fill(row, row + cols, 0.0f);
          if (i < cols) row[i] = static_cast<float>(node.gamma);
          for (size_t k = 0; k < node.operands.size(); ++k) {
            const MatrixView& term = operand(k);
            dispatch_storage_type(term.type, [&](auto tag) { accumulate_row<decltype(tag)>(term, i, static_cast<float>(node.coefficients[k]), row); });
          }
          dispatch_storage_type(out.type, [&](auto tag) { store_row<decltype(tag)>(out, i, row); });
        });
        break;
      }
      case ir::OpKind::Output: {
        const MatrixView& source = operand(0);
        MatrixView target{output, ScalarType::F32, rows, cols, cols, 1};
        for_each_loaded_row(pool, source, [&](int64_t i, float* row) {
          store_row<float>(target, i, row);
        });
        break;
      }
    }
  }
}

}  // namespace orthojit::cpu
