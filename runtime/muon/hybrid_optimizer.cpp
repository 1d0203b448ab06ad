// The hybrid Muon + AdamW optimizer (see hybrid_optimizer.h).
#include "runtime/muon/hybrid_optimizer.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "kernels/program_library.h"
#include "runtime/muon/muon_step_launcher.h"
#include "runtime/muon/muon_variants.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/muon/state_format.h"
#include "runtime/muon/variant_state.h"
#include "runtime/orthogonalize.h"
#include "support/rounding.h"

namespace orthojit::runtime {
struct HybridOptimizer::Entry {
  Parameter parameter;
  bool muon = false;
  MatrixPlan plan;
};

HybridOptimizer::HybridOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings)
    : settings_(std::move(settings)), orthogonalizer_(std::make_unique<BlockOrthogonalizer>(settings_.muon)) {
  std::map<std::string, bool> seen;
  for (Parameter& parameter : parameters) {
    if (parameter.name.empty()) throw std::invalid_argument("a parameter has an empty name");
    if (seen[parameter.name]) throw std::invalid_argument("parameter '" + parameter.name + "' is given twice");
    seen[parameter.name] = true;
    if (!parameter.requires_grad) continue;  // never touched
    if (parameter.shape.empty()) parameter.shape = {1};  // a scalar is a 1-element vector
    if (!parameter.data) throw std::invalid_argument("parameter '" + parameter.name + "' has no data pointer");
    Entry entry;
    entry.muon = parameter.use_muon.value_or(default_use_muon(parameter.name, parameter.shape, settings_.tagging));
    if (entry.muon) entry.plan = plan_matrices(parameter, settings_.tensor_layout, settings_.conv_scale);
    State& state = state_[parameter.name];
    const size_t elements = static_cast<size_t>(parameter.elements());
    if (entry.muon) {
      state.momentum.assign(elements, 0.0f);
      state.second_moment.assign(static_cast<size_t>(variant_state_elements(settings_.muon.variant, entry.plan)), 0.0f);
    } else {
      state.exp_avg.assign(elements, 0.0f);
      state.exp_avg_sq.assign(elements, 0.0f);
    }
    entry.parameter = std::move(parameter);
    entries_.push_back(std::move(entry));
  }
  // Fail now, not at the first step, on a program or setting that cannot compile; the program is
  // read once, here (a file removed or changed after build does not change what runs).
  if (std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.muon; })) orthogonalizer_->program();
}

HybridOptimizer::~HybridOptimizer() = default;

StepReport HybridOptimizer::step() {
  StepReport report;
  // Every gradient is checked before anything changes: a non-finite value skips the whole step.
  for (const Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    if (!p.grad) continue;
    const int64_t i = first_nonfinite(p.grad_dtype, p.grad, p.elements());
    if (i >= 0) {
      const double value = load_element(p.grad_dtype, p.grad, i);
      report.skipped = true;
      report.reason = "parameter '" + p.name + "': gradient element " + std::to_string(i) + " is " + (std::isnan(value) ? "NaN" : "infinite") +
                      "; the step was skipped and no parameter or state changed";
      return report;
    }
  }
  // A missing gradient is zeros (DeepSpeed, Keller: and the full step); one buffer, read only,
  // serves every such parameter.
  std::vector<float> zeros;
  if (settings_.missing_gradient == MissingGradient::Zero)
    for (const Entry& entry : entries_)
      if (!entry.parameter.grad) zeros.resize(std::max(zeros.size(), static_cast<size_t>(entry.parameter.elements())), 0.0f);
  auto gradient_of = [&](const Parameter& p) { return p.grad ? std::pair<const void*, DType>{p.grad, p.grad_dtype} : std::pair<const void*, DType>{zeros.data(), DType::F32}; };
  auto steps = [&](const Entry& entry) { return entry.parameter.grad || settings_.missing_gradient == MissingGradient::Zero; };
  // Muon parameters step together: the blocks of every parameter, grouped by shape and types
  // into one compiled Muon step per group (muon_step_launcher.h: the momentum fused into the
  // normalize, the update after the last product). A model's equal shapes (every layer's) then
  // run as one batch, whole rounds of one matrix per core, instead of a call per parameter with
  // each small product split across the cores. Gradients are read where they are, in their own
  // type. NorMuon / AdaMuon rescale O with whole-block reductions between NS and the update: the
  // unfused host path, per parameter (muon_variants.h).
  //
  // Every kernel the step runs is compiled here, before anything changes: a compile that fails
  // (a setting the backend refuses, a shape it cannot take) leaves every parameter and state as
  // it was, and the step can be retried after a fix without stepping the first parameters twice.
  const bool fused = settings_.muon.variant == MuonVariant::Muon;
  std::vector<MuonStepTensor> tensors;
  for (Entry& entry : entries_) {
    if (!entry.muon || !steps(entry)) continue;
    if (!fused) {
      orthogonalizer_->prepare(entry.plan);
      continue;
    }
    const Parameter& p = entry.parameter;
    const auto [gradient, grad_type] = gradient_of(p);
    tensors.push_back({&entry.plan, grad_type, reinterpret_cast<std::uintptr_t>(gradient), reinterpret_cast<std::uintptr_t>(state_.at(p.name).momentum.data()),
                       p.dtype, reinterpret_cast<std::uintptr_t>(p.data)});
  }
  const std::vector<MuonStepGroup> groups = muon_step_groups(*orthogonalizer_, settings_.muon, tensors);
  for (Entry& entry : entries_) {
    if (!entry.parameter.grad) ++report.without_gradient;
    if (!steps(entry)) continue;
    const auto [gradient, grad_type] = gradient_of(entry.parameter);
    if (!entry.muon) {
      adam_update(entry, gradient, grad_type);
      ++report.adam_updated;
      continue;
    }
    if (!fused) variant_update(entry, gradient, grad_type, report);
    ++report.muon_updated;
  }
  const auto started = std::chrono::steady_clock::now();
  for (const MuonStepGroup& group : groups) group.compiled->run_muon_step(group.matrices, nullptr);
  report.orthogonalize_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ++steps_;
  return report;
}

void HybridOptimizer::variant_update(Entry& entry, const void* gradient, DType grad_type, StepReport& report) {
  const Parameter& p = entry.parameter;
  State& state = state_.at(p.name);
  const double before = orthogonalizer_->seconds();
  if (variant_counts_steps(settings_.muon.variant)) state.variant_step += 1;
  variant_muon_step(settings_.muon, entry.plan, *orthogonalizer_, grad_type, gradient, state.momentum.data(), state.second_moment.data(), state.variant_step,
                    p.dtype, p.data);
  report.orthogonalize_seconds += orthogonalizer_->seconds() - before;
}

void HybridOptimizer::adam_update(Entry& entry, const void* gradient, DType grad_type) {
  const Parameter& p = entry.parameter;
  State& state = state_.at(p.name);
  state.step += 1;
  adam_step(settings_.adam, state.step, grad_type, gradient, state.exp_avg.data(), state.exp_avg_sq.data(), p.dtype, p.data, 0, p.elements());
}

void HybridOptimizer::set_learning_rates(double muon_lr, double adam_lr) {
  if (!(muon_lr >= 0) || !(adam_lr >= 0) || !std::isfinite(muon_lr) || !std::isfinite(adam_lr))
    throw std::invalid_argument("learning rates must be finite and >= 0");
  settings_.muon.lr = muon_lr;
  settings_.adam.lr = adam_lr;
  // The orthogonalizers do not depend on the lr: the cache stays valid.
}

namespace {
template <class Entries>
auto& find_entry(Entries& entries, const std::string& name) {
  for (auto& entry : entries)
    if (entry.parameter.name == name) return entry;
  throw std::invalid_argument("no optimized parameter named '" + name + "'");
}
}  // namespace

void HybridOptimizer::set_gradient(const std::string& name, const void* grad, DType grad_dtype) {
  Entry& entry = find_entry(entries_, name);
  entry.parameter.grad = grad;
  entry.parameter.grad_dtype = grad_dtype;
}

void HybridOptimizer::set_data(const std::string& name, void* data) {
  if (!data) throw std::invalid_argument("parameter '" + name + "': null data pointer");
  find_entry(entries_, name).parameter.data = data;
}

ParameterInfo parameter_info(const Parameter& parameter, bool muon, const MatrixPlan& plan, MuonVariant variant) {
  ParameterInfo info;
  info.name = parameter.name;
  info.shape = parameter.shape;
  info.muon = muon;
  info.matrices = plan;
  info.state_bytes = parameter.elements() * (muon ? 4 : 8);  // f32 momentum; f32 exp_avg and exp_avg_sq
  if (muon) info.state_bytes += 4 * variant_state_elements(variant, plan) + (variant_counts_steps(variant) ? 8 : 0);  // f32 second moment, i64 step
  return info;
}

void check_qk_clip_targets(const Parameter& q, const Parameter& k, int64_t head_rows, size_t heads) {
  // One matrix as both would be scaled twice (by γ, not √γ).
  if (q.name == k.name) throw std::invalid_argument("QK-clip: W_q and W_k are the same parameter '" + q.name + "'");
  for (const Parameter* p : {&q, &k})
    if (p->shape.size() < 2 || p->shape[0] % head_rows != 0 || p->shape[0] / head_rows != static_cast<int64_t>(heads))
      throw std::invalid_argument("QK-clip: '" + p->name + "' " + shape_text(p->shape) + " does not split into " + std::to_string(heads) +
                                  " heads of " + std::to_string(head_rows) + " rows");
}

std::vector<ParameterInfo> HybridOptimizer::parameters() const {
  std::vector<ParameterInfo> infos;
  for (const Entry& entry : entries_) infos.push_back(parameter_info(entry.parameter, entry.muon, entry.plan, settings_.muon.variant));
  return infos;
}

StateBytes HybridOptimizer::state_bytes() const {
  StateBytes bytes;
  for (const Entry& entry : entries_)
    (entry.muon ? bytes.muon : bytes.adam) += parameter_info(entry.parameter, entry.muon, entry.plan, settings_.muon.variant).state_bytes;
  return bytes;
}

void HybridOptimizer::qk_clip(const std::string& q_name, const std::string& k_name, int64_t head_rows, const std::vector<double>& s_max, double tau) {
  check_qk_clip(head_rows, s_max, tau);
  check_qk_clip_targets(find_entry(entries_, q_name).parameter, find_entry(entries_, k_name).parameter, head_rows, s_max.size());
  for (const std::string* name : {&q_name, &k_name}) {
    Parameter& p = find_entry(entries_, *name).parameter;
    qk_clip_rows(p.dtype, p.data, p.elements() / p.shape[0], head_rows, s_max, tau);
  }
}

std::vector<StateOwner> HybridOptimizer::state_owners() const {
  std::vector<StateOwner> owners;
  for (const Entry& entry : entries_) owners.push_back({entry.parameter.name, entry.parameter.shape, entry.muon, entry.plan});
  return owners;
}

void HybridOptimizer::save_state(const std::string& path, const FileProgressCallback& progress) const {
  write_state_file(path, state_owners(), state_, settings_, steps_, progress);
}

void HybridOptimizer::load_state(const std::string& path, const FileProgressCallback& progress) {
  int64_t steps = 0;
  std::map<std::string, State> loaded = read_state_file(path, state_owners(), settings_, steps, progress);
  state_ = std::move(loaded);
  steps_ = steps;
}

}  // namespace orthojit::runtime
