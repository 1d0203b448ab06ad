// Update rules (see update_rules.h).
#include "runtime/muon/update_rules.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cpu/thread_pool.h"
#include "ir/muon_step.h"
#include "kernels/program_library.h"
#include "runtime/orthogonalize.h"
#include "support/rounding.h"

namespace orthojit::runtime {
namespace {

// Runs body(lo, hi) over [begin, end) in chunks on the shared thread pool. Every element is
// computed alone, so the bits do not depend on the chunking or the thread count.
template <class Body>
void for_chunks(int64_t begin, int64_t end, const Body& body) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  const int64_t count = end - begin;
  if (count <= kChunk) {
    if (count > 0) body(begin, end);
    return;
  }
  cpu::shared_thread_pool().parallel_for((count + kChunk - 1) / kChunk, [&](int64_t task, int) {
    const int64_t lo = begin + task * kChunk;
    body(lo, std::min(end, lo + kChunk));
  });
}


}  // namespace

// The element access and formulas are the IR's (compiler/ir/muon_step.h): one definition for these
// rules, the interpreter, the CPU backend's fused Muon step and the generated CUDA.
double load_element(DType type, const void* base, int64_t index) { return ir::load_stored(scalar_type(type), base, index); }

void store_element(DType type, void* base, int64_t index, double value) { ir::store_rounded(scalar_type(type), base, index, value); }

// The loops below dispatch on the storage type once per chunk and then access elements through
// ir::load_stored_as / store_rounded_as, inline: the per-element switch and calls of
// load_element / store_element were most of a small layer's Muon step on the CPU (a 256x896 bf16
// parameter: 9.4 ms per step, 3.1 of them Newton-Schulz; bench/RESULTS.md).

void widen_to_f32(DType type, const void* data, int64_t count, float* out) {
  ir::with_stored_type(scalar_type(type), [&](auto t) {
    constexpr ScalarType T = decltype(t)::value;
    for_chunks(0, count, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = static_cast<float>(ir::load_stored_as<T>(data, i));
    });
  });
}

int64_t first_nonfinite(DType type, const void* data, int64_t count) {
  // The exponent field all ones is exactly "NaN or infinite", in every storage format.
  auto scan = [&](auto bits_tag, auto exponent_mask) -> int64_t {
    using Bits = decltype(bits_tag);
    const Bits* words = static_cast<const Bits*>(data);
    constexpr int64_t kBlock = 4096;  // a branch-free pass per block; the index only once one is found
    for (int64_t lo = 0; lo < count; lo += kBlock) {
      const int64_t hi = std::min(count, lo + kBlock);
      bool any = false;
      for (int64_t i = lo; i < hi; ++i) any |= (words[i] & exponent_mask) == exponent_mask;
      if (!any) continue;
      for (int64_t i = lo; i < hi; ++i)
        if ((words[i] & exponent_mask) == exponent_mask) return i;
    }
    return -1;
  };
  switch (scalar_type(type)) {
    case ScalarType::BF16: return scan(uint16_t{}, uint16_t{0x7f80});
    case ScalarType::F16: return scan(uint16_t{}, uint16_t{0x7c00});
    case ScalarType::F32: return scan(uint32_t{}, uint32_t{0x7f800000u});
    case ScalarType::F64: return scan(uint64_t{}, uint64_t{0x7ff0000000000000ull});
  }
  return -1;
}

double lr_scale(LrAdjust adjust, int64_t rows, int64_t cols) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  switch (adjust) {
    case LrAdjust::None: return 1.0;
    case LrAdjust::Original: return std::sqrt(std::max(1.0, r / c));
    case LrAdjust::MatchRmsAdamW: return 0.2 * std::sqrt(std::max(r, c));
    case LrAdjust::Spectral: return std::sqrt(r / c);
  }
  return 1.0;
}

void muon_momentum(const MuonGroupSettings& muon, DType grad_type, const void* gradient, float* momentum, float* update, int64_t count) {
  const double beta = muon.momentum;
  const bool ema = muon.momentum_kind == MomentumKind::Ema;
  ir::with_stored_type(scalar_type(grad_type), [&](auto grad_stored) {
    constexpr ScalarType G = decltype(grad_stored)::value;
    for_chunks(0, count, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const float g = static_cast<float>(ir::load_stored_as<G>(gradient, i));  // exactly widen_to_f32's value
        const float next = ir::muon_momentum_next(ema, beta, g, momentum[i]);
        momentum[i] = next;
        update[i] = ir::muon_update_value(ema, muon.nesterov, beta, g, next);
      }
    });
  });
}

void apply_muon(const MuonGroupSettings& muon, const MatrixPlan& plan, DType type, void* data, const float* orthogonal, int64_t begin, int64_t end) {
  // The step of each row of a matrix: lr·s with s from the row's block.
  std::vector<double> row_step(static_cast<size_t>(plan.rows), 0.0);
  for (const MatrixBlock& block : plan.blocks) {
    const auto [scale_rows, scale_cols] = scale_shape(plan, block);
    for (int64_t row = block.row_offset; row < block.row_offset + block.rows; ++row)
      row_step[static_cast<size_t>(row)] = muon.lr * lr_scale(muon.lr_adjust, scale_rows, scale_cols);
  }
  const double decay = 1.0 - muon.lr * muon.weight_decay;
  const int64_t matrix_elements = plan.rows * plan.cols;
  ir::with_stored_type(scalar_type(type), [&](auto t) {
    constexpr ScalarType T = decltype(t)::value;
    for_chunks(begin, end, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi;) {  // a row at a time: its step once, no division per element
        const int64_t in_matrix = i % matrix_elements;
        const int64_t row_end = std::min(hi, i + plan.cols - in_matrix % plan.cols);
        const double step = row_step[static_cast<size_t>(in_matrix / plan.cols)];
        for (; i < row_end; ++i) ir::store_rounded_as<T>(data, i, ir::muon_parameter_next(ir::load_stored_as<T>(data, i), decay, step, orthogonal[i]));
      }
    });
  });
}

void adam_step(const AdamGroupSettings& adam, int64_t step, DType grad_type, const void* gradient, float* exp_avg, float* exp_avg_sq, DType type,
               void* data, int64_t begin, int64_t count) {
  const double t = static_cast<double>(step);
  const double beta1 = adam.beta1, beta2 = adam.beta2, lr = adam.lr, eps = adam.eps;
  const double bias1 = 1.0 - std::pow(beta1, t), bias2 = 1.0 - std::pow(beta2, t);
  const double decay = 1.0 - lr * adam.weight_decay;
  const bool standard = adam.formula == AdamFormula::Standard;
  ir::with_stored_type(scalar_type(grad_type), [&](auto grad_stored) {
    constexpr ScalarType G = decltype(grad_stored)::value;
    ir::with_stored_type(scalar_type(type), [&](auto stored) {
      constexpr ScalarType T = decltype(stored)::value;
      for_chunks(0, count, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          const double g = static_cast<float>(ir::load_stored_as<G>(gradient, i));  // exactly widen_to_f32's value
          const float m = static_cast<float>(exp_avg[i] + (1.0 - beta1) * (g - exp_avg[i]));
          const float v = static_cast<float>(exp_avg_sq[i] + (1.0 - beta2) * (g * g - exp_avg_sq[i]));
          exp_avg[i] = m;
          exp_avg_sq[i] = v;
          const double delta = standard ? lr * (m / bias1) / (std::sqrt(v / bias2) + eps)
                                        : lr * std::sqrt(bias2) / bias1 * (m / (eps + std::sqrt(static_cast<double>(v))));
          ir::store_rounded_as<T>(data, begin + i, ir::load_stored_as<T>(data, begin + i) * decay - delta);
        }
      });
    });
  });
}

void check_qk_clip(int64_t head_rows, const std::vector<double>& s_max, double tau) {
  if (!(tau > 0) || !std::isfinite(tau)) throw std::invalid_argument("QK-clip: tau must be a positive number");
  if (head_rows <= 0) throw std::invalid_argument("QK-clip: head_rows must be positive");
  for (double s : s_max)
    if (!std::isfinite(s) || s < 0) throw std::invalid_argument("QK-clip: every S_max must be finite and >= 0");
}

void qk_clip_rows(DType type, void* data, int64_t row_length, int64_t head_rows, const std::vector<double>& s_max, double tau) {
  for (size_t head = 0; head < s_max.size(); ++head) {
    if (!(s_max[head] > tau)) continue;  // γ = 1: untouched
    const double factor = std::sqrt(tau / s_max[head]);
    const int64_t begin = static_cast<int64_t>(head) * head_rows * row_length, end = begin + head_rows * row_length;
    for (int64_t i = begin; i < end; ++i) store_element(type, data, i, load_element(type, data, i) * factor);
  }
}

dsl::Program muon_program(const MuonGroupSettings& muon) {
  dsl::Program program = kernels::load_program_by_name_or_path(muon.program);
  if (muon.coefficients) {
    const int steps = muon.ns_steps.value_or(static_cast<int>(program.steps.size()));
    program.steps.assign(static_cast<size_t>(steps), *muon.coefficients);
    program.coefficient_set.clear();
  } else if (muon.ns_steps && static_cast<size_t>(*muon.ns_steps) != program.steps.size()) {
    // A constant schedule (jordan) repeats; a per-step one (polar express) has no natural extension.
    const bool constant = std::all_of(program.steps.begin(), program.steps.end(), [&](const dsl::Triple& t) { return t == program.steps.front(); });
    if (!constant || program.steps.empty())
      throw std::invalid_argument("muon.ns_steps = " + std::to_string(*muon.ns_steps) + ": " + program.name + " has " + std::to_string(program.steps.size()) +
                                  " steps with different coefficients; give muon coefficients too, or a program with that many steps");
    program.steps.assign(static_cast<size_t>(*muon.ns_steps), program.steps.front());
  }
  if (muon.ns_eps) program.normalization.eps = *muon.ns_eps;
  if (muon.norm_clamp) program.normalization.mode = dsl::Normalization::Mode::Clamp;
  // Gram restarts must lie inside the (possibly changed) schedule.
  program.gram_restarts.erase(std::remove_if(program.gram_restarts.begin(), program.gram_restarts.end(),
                                             [&](int step) { return step < 1 || static_cast<size_t>(step) >= program.steps.size(); }),
                              program.gram_restarts.end());
  return program;
}

const dsl::Program& BlockOrthogonalizer::program() {
  if (!program_) program_ = muon_program(muon_);
  return *program_;
}

ir::MuonStepSpec BlockOrthogonalizer::step_spec(const MuonGroupSettings& muon, DType grad_type, DType type) {
  return {muon.momentum_kind == MomentumKind::Ema, muon.nesterov, scalar_type(grad_type), scalar_type(type)};
}

void BlockOrthogonalizer::prepare(const MatrixPlan& plan) {
  // The batches orthogonalize forms: every block of one height, over the plan's batch.
  std::map<int64_t, int64_t> blocks_by_height;
  for (const MatrixBlock& block : plan.blocks) blocks_by_height[block.rows] += plan.batch;
  for (const auto& [rows, count] : blocks_by_height) compiled(count, rows, plan.cols);
}

std::shared_ptr<CompiledOrthogonalizer> BlockOrthogonalizer::compiled(int64_t batch, int64_t rows, int64_t cols, const std::optional<ir::MuonStepSpec>& step) {
  std::string key = std::to_string(batch) + "x" + std::to_string(rows) + "x" + std::to_string(cols);
  if (step) key += " step " + step->describe();
  if (auto found = cache_.find(key); found != cache_.end()) return found->second;
  OrthogonalizeOptions options;
  options.muon_step = step;
  options.strategy = muon_.strategy;
  options.precision = muon_.precision;
  options.gram_restarts = muon_.gram_restarts;
  options.backend = muon_.backend;
  options.threads = muon_.threads;
  if (muon_.strategy == "gram" && rows == cols && muon_.square_uses_standard) {
    options.strategy = "standard";
    options.gram_restarts.reset();
    if (muon_.square_precision) options.precision = muon_.square_precision;
  }
  auto result = compile_orthogonalizer(program(), batch, rows, cols, options);
  cache_.emplace(key, result);
  return result;
}

void BlockOrthogonalizer::orthogonalize(const MatrixPlan& plan, const float* update, float* orthogonal) {
  const int64_t cols = plan.cols, matrix_elements = plan.rows * plan.cols;
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_height;  // rows -> (matrix, row offset)
  for (int64_t matrix = 0; matrix < plan.batch; ++matrix)
    for (const MatrixBlock& block : plan.blocks) by_height[block.rows].push_back({matrix, block.row_offset});
  const auto started = std::chrono::steady_clock::now();
  std::vector<float> staging, result;
  for (const auto& [rows, blocks] : by_height) {
    const int64_t block_elements = rows * cols;
    staging.resize(static_cast<size_t>(block_elements) * blocks.size());
    result.resize(staging.size());
    for (size_t b = 0; b < blocks.size(); ++b)
      std::memcpy(staging.data() + static_cast<int64_t>(b) * block_elements, update + blocks[b].first * matrix_elements + blocks[b].second * cols,
                  static_cast<size_t>(block_elements) * sizeof(float));
    compiled(static_cast<int64_t>(blocks.size()), rows, cols)->run(staging.data(), result.data());
    for (size_t b = 0; b < blocks.size(); ++b)
      std::memcpy(orthogonal + blocks[b].first * matrix_elements + blocks[b].second * cols, result.data() + static_cast<int64_t>(b) * block_elements,
                  static_cast<size_t>(block_elements) * sizeof(float));
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

}  // namespace orthojit::runtime
