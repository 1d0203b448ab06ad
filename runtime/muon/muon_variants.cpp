// NorMuon and AdaMuon (see muon_variants.h for the formulas and their sources).
#include "runtime/muon/muon_variants.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "runtime/muon/update_rules.h"

namespace orthojit::runtime {
namespace {

// The first element of row `row` of matrix `matrix` (rows x cols, row-major).
int64_t row_start(const MatrixPlan& plan, int64_t matrix, int64_t row) { return (matrix * plan.rows + row) * plan.cols; }

double squares(const float* values, int64_t count) {
  double sum = 0;
  for (int64_t i = 0; i < count; ++i) sum += static_cast<double>(values[i]) * static_cast<double>(values[i]);
  return sum;
}

}  // namespace

double variant_beta2(const MuonGroupSettings& muon) {
  if (muon.variant_beta2) return *muon.variant_beta2;
  return muon.variant == MuonVariant::AdaMuon ? 0.999 : 0.95;  // adamuon.py beta2=0.999; normuon.py beta2=0.95
}

double variant_eps(const MuonGroupSettings& muon) {
  if (muon.variant_eps) return *muon.variant_eps;
  return muon.variant == MuonVariant::AdaMuon ? 1e-8 : 1e-10;  // adamuon.py eps=1e-8; normuon.py's literal 1e-10
}

int64_t variant_state_elements(MuonVariant variant, const MatrixPlan& plan) {
  switch (variant) {
    case MuonVariant::Muon: return 0;
    case MuonVariant::NorMuon: return plan.batch * plan.rows;
    case MuonVariant::AdaMuon: return plan.batch * plan.rows * plan.cols;
  }
  return 0;
}

bool variant_counts_steps(MuonVariant variant) { return variant == MuonVariant::AdaMuon; }

std::string variant_state_suffix(MuonVariant variant) {
  return variant == MuonVariant::NorMuon ? ".second_momentum_buffer" : variant == MuonVariant::AdaMuon ? ".v_buffer" : "";
}

std::vector<int64_t> variant_state_shape(MuonVariant variant, const MatrixPlan& plan, const std::vector<int64_t>& parameter_shape) {
  if (variant == MuonVariant::NorMuon) return {plan.batch * plan.rows, 1};
  if (variant == MuonVariant::AdaMuon) return parameter_shape;
  return {};
}

void sign_in_place(float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) values[i] = values[i] > 0 ? 1.0f : values[i] < 0 ? -1.0f : 0.0f;
}

void normuon_rescale(const MuonGroupSettings& muon, const MatrixPlan& plan, float* orthogonal, float* row_second_moment) {
  const double beta2 = variant_beta2(muon), eps = variant_eps(muon);
  const int64_t cols = plan.cols;
  std::vector<double> scaled;
  for (int64_t matrix = 0; matrix < plan.batch; ++matrix)
    for (const MatrixBlock& block : plan.blocks) {
      float* const first = orthogonal + row_start(plan, matrix, block.row_offset);
      const int64_t elements = block.rows * cols;
      const double norm = std::sqrt(squares(first, elements));
      scaled.assign(static_cast<size_t>(elements), 0.0);
      double scaled_squares = 0;
      for (int64_t r = 0; r < block.rows; ++r) {
        const float* row = first + r * cols;
        float& v = row_second_moment[matrix * plan.rows + block.row_offset + r];
        const double mean = squares(row, cols) / static_cast<double>(cols);
        v = static_cast<float>(v + (1.0 - beta2) * (mean - v));  // second_momentum.lerp_(v_mean, 1 - beta2), f32 state
        const double step = 1.0 / (std::sqrt(static_cast<double>(v)) + eps);
        for (int64_t j = 0; j < cols; ++j) {
          const double value = row[j] * step;
          scaled[static_cast<size_t>(r * cols + j)] = value;
          scaled_squares += value * value;
        }
      }
      const double keep_norm = norm / (std::sqrt(scaled_squares) + eps);
      for (int64_t i = 0; i < elements; ++i) first[i] = static_cast<float>(scaled[static_cast<size_t>(i)] * keep_norm);
    }
}

void adamuon_rescale(const MuonGroupSettings& muon, const MatrixPlan& plan, int64_t step, float* orthogonal, float* second_moment) {
  if (step < 1) throw std::invalid_argument("adamuon: the step count must be >= 1 (incremented before the update)");
  const double beta2 = variant_beta2(muon), eps = variant_eps(muon);
  const double bias2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const int64_t cols = plan.cols;
  std::vector<double> scaled;
  for (int64_t matrix = 0; matrix < plan.batch; ++matrix)
    for (const MatrixBlock& block : plan.blocks) {
      const int64_t begin = row_start(plan, matrix, block.row_offset), elements = block.rows * cols;
      float* const o = orthogonal + begin;
      float* const v = second_moment + begin;
      scaled.assign(static_cast<size_t>(elements), 0.0);
      double scaled_squares = 0;
      for (int64_t i = 0; i < elements; ++i) {
        const double oi = o[i];
        v[i] = static_cast<float>(beta2 * v[i] + (1.0 - beta2) * oi * oi);  // v.mul_(beta2).addcmul_(g, g, 1 - beta2), f32 state
        const double value = oi / (std::sqrt(static_cast<double>(v[i]) / bias2) + eps);
        scaled[static_cast<size_t>(i)] = value;
        scaled_squares += value * value;
      }
      // adamuon.py: g · min(p.shape)^0.5 / (‖g‖ + eps): the Frobenius norm of an orthogonal block.
      const double rescale = std::sqrt(static_cast<double>(std::min(block.rows, cols))) / (std::sqrt(scaled_squares) + eps);
      for (int64_t i = 0; i < elements; ++i) o[i] = static_cast<float>(scaled[static_cast<size_t>(i)] * rescale);
    }
}

void variant_muon_step(const MuonGroupSettings& muon, const MatrixPlan& plan, BlockOrthogonalizer& orthogonalizer, DType grad_type, const void* gradient,
                       float* momentum, float* second_moment, int64_t step, DType type, void* data) {
  if (muon.variant == MuonVariant::Muon) throw std::invalid_argument("variant_muon_step: muon.variant is muon (use BlockOrthogonalizer::muon_step)");
  const int64_t count = plan.batch * plan.rows * plan.cols;
  std::vector<float> update(static_cast<size_t>(count)), orthogonal(update.size());
  muon_momentum(muon, grad_type, gradient, momentum, update.data(), count);
  if (muon.variant == MuonVariant::AdaMuon && muon.sign_momentum) sign_in_place(update.data(), count);
  orthogonalizer.orthogonalize(plan, update.data(), orthogonal.data());
  if (muon.variant == MuonVariant::NorMuon) normuon_rescale(muon, plan, orthogonal.data(), second_moment);
  else adamuon_rescale(muon, plan, step, orthogonal.data(), second_moment);
  apply_muon(muon, plan, type, data, orthogonal.data(), 0, count);
}

}  // namespace orthojit::runtime
