// The hybrid Muon + AdamW optimizer (see hybrid_optimizer.h).
#include "runtime/muon/hybrid_optimizer.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/program_library.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/orthogonalize.h"
#include "support/rounding.h"

namespace orthojit::runtime {
namespace {

double load(DType type, const void* base, int64_t index) {
  switch (type) {
    case DType::F32: return static_cast<const float*>(base)[index];
    case DType::BF16: return std::bit_cast<float>(static_cast<uint32_t>(static_cast<const uint16_t*>(base)[index]) << 16);
    case DType::F16: return static_cast<double>(std::bit_cast<_Float16>(static_cast<const uint16_t*>(base)[index]));
  }
  return 0;
}

// Rounds `value` once (to nearest even) to the parameter's type.
void store(DType type, void* base, int64_t index, double value) {
  switch (type) {
    case DType::F32: static_cast<float*>(base)[index] = static_cast<float>(value); return;
    case DType::BF16: {
      const float rounded = static_cast<float>(round_to(ScalarType::BF16, value));  // exact in f32
      static_cast<uint16_t*>(base)[index] = static_cast<uint16_t>(std::bit_cast<uint32_t>(rounded) >> 16);
      return;
    }
    case DType::F16:
      static_cast<uint16_t*>(base)[index] = std::bit_cast<uint16_t>(static_cast<_Float16>(round_to(ScalarType::F16, value)));
      return;
  }
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

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}

// The orthogonalizer program with the settings' schedule and normalization overrides applied.
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

}  // namespace

struct HybridOptimizer::Entry {
  Parameter parameter;
  bool muon = false;
  MatrixPlan plan;
};

HybridOptimizer::HybridOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings) : settings_(std::move(settings)) {
  std::map<std::string, bool> seen;
  for (Parameter& parameter : parameters) {
    if (parameter.name.empty()) throw std::invalid_argument("a parameter has an empty name");
    if (seen[parameter.name]) throw std::invalid_argument("parameter '" + parameter.name + "' is given twice");
    seen[parameter.name] = true;
    if (!parameter.requires_grad) continue;  // never touched
    if (parameter.shape.empty()) parameter.shape = {1};  // a scalar is a 1-element vector
    if (!parameter.data) throw std::invalid_argument("parameter '" + parameter.name + "' has no data pointer");
    Entry entry;
    entry.muon = parameter.use_muon.value_or(default_use_muon(parameter.name, parameter.shape));
    if (entry.muon) entry.plan = plan_matrices(parameter, settings_.experts_as_batch);
    State& state = state_[parameter.name];
    const size_t elements = static_cast<size_t>(parameter.elements());
    if (entry.muon) state.momentum.assign(elements, 0.0f);
    else {
      state.exp_avg.assign(elements, 0.0f);
      state.exp_avg_sq.assign(elements, 0.0f);
    }
    entry.parameter = std::move(parameter);
    entries_.push_back(std::move(entry));
  }
  // Fail now, not at the first step, on a program or setting that cannot compile.
  if (std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.muon; })) muon_program(settings_.muon);
}

HybridOptimizer::~HybridOptimizer() = default;

std::shared_ptr<CompiledOrthogonalizer> HybridOptimizer::orthogonalizer(int64_t batch, int64_t rows, int64_t cols) {
  const std::string key = std::to_string(batch) + "x" + std::to_string(rows) + "x" + std::to_string(cols);
  if (auto found = orthogonalizers_.find(key); found != orthogonalizers_.end()) return found->second;
  const MuonGroupSettings& muon = settings_.muon;
  OrthogonalizeOptions options;
  options.strategy = muon.strategy;
  options.precision = muon.precision;
  options.gram_restarts = muon.gram_restarts;
  options.backend = muon.backend;
  options.threads = muon.threads;
  if (muon.strategy == "gram" && rows == cols && muon.square_uses_standard) {
    options.strategy = "standard";
    options.gram_restarts.reset();
    if (muon.square_precision) options.precision = muon.square_precision;
  }
  auto compiled = compile_orthogonalizer(muon_program(muon), batch, rows, cols, options);
  orthogonalizers_.emplace(key, compiled);
  return compiled;
}

StepReport HybridOptimizer::step() {
  StepReport report;
  // Every gradient is checked before anything changes: a non-finite value skips the whole step.
  for (const Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    if (!p.grad) continue;
    const int64_t count = p.elements();
    for (int64_t i = 0; i < count; ++i) {
      const double value = load(p.grad_dtype, p.grad, i);
      if (!std::isfinite(value)) {
        report.skipped = true;
        report.reason = "parameter '" + p.name + "': gradient element " + std::to_string(i) + " is " + (std::isnan(value) ? "NaN" : "infinite") +
                        "; the step was skipped and no parameter or state changed";
        return report;
      }
    }
  }
  std::vector<float> gradient;
  for (Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    if (!p.grad) {
      ++report.without_gradient;
      continue;
    }
    gradient.resize(static_cast<size_t>(p.elements()));
    for (size_t i = 0; i < gradient.size(); ++i) gradient[i] = static_cast<float>(load(p.grad_dtype, p.grad, static_cast<int64_t>(i)));
    if (entry.muon) {
      muon_update(entry, gradient, report);
      ++report.muon_updated;
    } else {
      adam_update(entry, gradient);
      ++report.adam_updated;
    }
  }
  ++steps_;
  return report;
}

void HybridOptimizer::muon_update(Entry& entry, const std::vector<float>& gradient, StepReport& report) {
  const MuonGroupSettings& muon = settings_.muon;
  const Parameter& p = entry.parameter;
  State& state = state_.at(p.name);
  const double beta = muon.momentum;
  std::vector<float> update(gradient.size());
  for (size_t i = 0; i < gradient.size(); ++i) {
    const double g = gradient[i], m = state.momentum[i];
    const float momentum = static_cast<float>(muon.momentum_kind == MomentumKind::Ema ? m + (1.0 - beta) * (g - m) : beta * m + g);
    state.momentum[i] = momentum;
    double u = momentum;
    if (muon.nesterov) u = muon.momentum_kind == MomentumKind::Ema ? g + beta * (static_cast<double>(momentum) - g) : g + beta * momentum;
    update[i] = static_cast<float>(u);
  }
  // Orthogonalize every block: blocks of equal height go through one batched call.
  const MatrixPlan& plan = entry.plan;
  const int64_t cols = plan.cols, matrix_elements = plan.rows * plan.cols;
  std::vector<float> orthogonal(update.size());
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
      std::memcpy(staging.data() + static_cast<int64_t>(b) * block_elements, update.data() + blocks[b].first * matrix_elements + blocks[b].second * cols,
                  static_cast<size_t>(block_elements) * sizeof(float));
    orthogonalizer(static_cast<int64_t>(blocks.size()), rows, cols)->run(staging.data(), result.data());
    for (size_t b = 0; b < blocks.size(); ++b)
      std::memcpy(orthogonal.data() + blocks[b].first * matrix_elements + blocks[b].second * cols, result.data() + static_cast<int64_t>(b) * block_elements,
                  static_cast<size_t>(block_elements) * sizeof(float));
  }
  report.orthogonalize_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // p ← p·(1 − lr·wd) − lr·s·O, s from each block's own shape.
  const double decay = 1.0 - muon.lr * muon.weight_decay;
  for (int64_t matrix = 0; matrix < plan.batch; ++matrix)
    for (const MatrixBlock& block : plan.blocks) {
      const double step = muon.lr * lr_scale(muon.lr_adjust, block.rows, cols);
      const int64_t begin = matrix * matrix_elements + block.row_offset * cols, end = begin + block.rows * cols;
      for (int64_t i = begin; i < end; ++i)
        store(p.dtype, p.data, i, load(p.dtype, p.data, i) * decay - step * static_cast<double>(orthogonal[static_cast<size_t>(i)]));
    }
}

void HybridOptimizer::adam_update(Entry& entry, const std::vector<float>& gradient) {
  const AdamGroupSettings& adam = settings_.adam;
  const Parameter& p = entry.parameter;
  State& state = state_.at(p.name);
  state.step += 1;
  const double t = static_cast<double>(state.step);
  const double bias1 = 1.0 - std::pow(adam.beta1, t), bias2 = 1.0 - std::pow(adam.beta2, t);
  const double decay = 1.0 - adam.lr * adam.weight_decay;
  for (size_t i = 0; i < gradient.size(); ++i) {
    const double g = gradient[i];
    const float m = static_cast<float>(state.exp_avg[i] + (1.0 - adam.beta1) * (g - state.exp_avg[i]));
    const float v = static_cast<float>(state.exp_avg_sq[i] + (1.0 - adam.beta2) * (g * g - state.exp_avg_sq[i]));
    state.exp_avg[i] = m;
    state.exp_avg_sq[i] = v;
    double step;
    if (adam.formula == AdamFormula::Standard) step = adam.lr * (m / bias1) / (std::sqrt(v / bias2) + adam.eps);
    else step = adam.lr * std::sqrt(bias2) / bias1 * (m / (adam.eps + std::sqrt(static_cast<double>(v))));
    const int64_t index = static_cast<int64_t>(i);
    store(p.dtype, p.data, index, load(p.dtype, p.data, index) * decay - step);
  }
}

void HybridOptimizer::set_learning_rates(double muon_lr, double adam_lr) {
  if (!(muon_lr >= 0) || !(adam_lr >= 0) || !std::isfinite(muon_lr) || !std::isfinite(adam_lr))
    throw std::invalid_argument("learning rates must be finite and >= 0");
  settings_.muon.lr = muon_lr;
  settings_.adam.lr = adam_lr;
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

std::vector<ParameterInfo> HybridOptimizer::parameters() const {
  std::vector<ParameterInfo> infos;
  for (const Entry& entry : entries_) {
    ParameterInfo info;
    info.name = entry.parameter.name;
    info.shape = entry.parameter.shape;
    info.muon = entry.muon;
    info.matrices = entry.plan;
    info.state_bytes = entry.parameter.elements() * (entry.muon ? 4 : 8);
    infos.push_back(info);
  }
  return infos;
}

StateBytes HybridOptimizer::state_bytes() const {
  StateBytes bytes;
  for (const Entry& entry : entries_) (entry.muon ? bytes.muon : bytes.adam) += entry.parameter.elements() * (entry.muon ? 4 : 8);
  return bytes;
}

void HybridOptimizer::qk_clip(const std::string& q_name, const std::string& k_name, int64_t head_rows, const std::vector<double>& s_max, double tau) {
  if (!(tau > 0) || !std::isfinite(tau)) throw std::invalid_argument("QK-clip: tau must be a positive number");
  if (head_rows <= 0) throw std::invalid_argument("QK-clip: head_rows must be positive");
  for (const std::string* name : {&q_name, &k_name}) {
    const Parameter& p = find_entry(entries_, *name).parameter;
    if (p.shape.size() < 2 || p.shape[0] % head_rows != 0 || p.shape[0] / head_rows != static_cast<int64_t>(s_max.size()))
      throw std::invalid_argument("QK-clip: '" + p.name + "' " + shape_text(p.shape) + " does not split into " + std::to_string(s_max.size()) +
                                  " heads of " + std::to_string(head_rows) + " rows");
  }
  for (double s : s_max)
    if (!std::isfinite(s) || s < 0) throw std::invalid_argument("QK-clip: every S_max must be finite and >= 0");
  for (const std::string* name : {&q_name, &k_name}) {
    Parameter& p = find_entry(entries_, *name).parameter;
    const int64_t row_length = p.elements() / p.shape[0];
    for (size_t head = 0; head < s_max.size(); ++head) {
      const double gamma = s_max[head] > tau ? tau / s_max[head] : 1.0;
      if (gamma >= 1.0) continue;  // below the threshold: untouched (not even rounded)
      const double factor = std::sqrt(gamma);
      const int64_t begin = static_cast<int64_t>(head) * head_rows * row_length, end = begin + head_rows * row_length;
      for (int64_t i = begin; i < end; ++i) store(p.dtype, p.data, i, load(p.dtype, p.data, i) * factor);
    }
  }
}

void HybridOptimizer::save_state(const std::string& path) const {
  std::vector<NamedTensor> tensors;
  auto f32_tensor = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
    NamedTensor tensor;
    tensor.name = name;
    tensor.dtype = "F32";
    tensor.shape = shape;
    tensor.bytes.resize(values.size() * sizeof(float));
    std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
    tensors.push_back(std::move(tensor));
  };
  for (const Entry& entry : entries_) {
    const State& state = state_.at(entry.parameter.name);
    if (entry.muon) {
      f32_tensor(entry.parameter.name + ".momentum_buffer", entry.parameter.shape, state.momentum);
    } else {
      f32_tensor(entry.parameter.name + ".exp_avg", entry.parameter.shape, state.exp_avg);
      f32_tensor(entry.parameter.name + ".exp_avg_sq", entry.parameter.shape, state.exp_avg_sq);
      NamedTensor step;
      step.name = entry.parameter.name + ".step";
      step.dtype = "I64";
      step.bytes.resize(sizeof(int64_t));
      std::memcpy(step.bytes.data(), &state.step, sizeof(int64_t));
      tensors.push_back(std::move(step));
    }
  }
  const std::map<std::string, std::string> metadata = {
      {"orthojit.format", "hybrid-optimizer-state/1"}, {"orthojit.preset", settings_.preset}, {"orthojit.steps_taken", std::to_string(steps_)}};
  write_safetensors(path, tensors, metadata);
}

void HybridOptimizer::load_state(const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  auto problem = [&](const std::string& what) { return std::runtime_error("optimizer state " + path + " does not match the parameters: " + what + "; nothing was loaded"); };
  if (auto format = file.metadata.find("orthojit.format"); format == file.metadata.end() || format->second != "hybrid-optimizer-state/1")
    throw problem("it is not an orthojit optimizer state (metadata orthojit.format is missing or not hybrid-optimizer-state/1)");
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& tensor : file.tensors) by_name[tensor.name] = &tensor;
  std::map<std::string, State> loaded;
  size_t used = 0;
  auto take = [&](const std::string& name, const char* dtype, const std::vector<int64_t>& shape) -> const NamedTensor& {
    auto found = by_name.find(name);
    if (found == by_name.end()) throw problem("no tensor '" + name + "'");
    if (found->second->dtype != dtype) throw problem("'" + name + "' is " + found->second->dtype + ", expected " + dtype);
    if (found->second->shape != shape) throw problem("'" + name + "' has shape " + shape_text(found->second->shape) + ", expected " + shape_text(shape));
    ++used;
    return *found->second;
  };
  auto floats = [](const NamedTensor& tensor) {
    std::vector<float> values(tensor.bytes.size() / sizeof(float));
    std::memcpy(values.data(), tensor.bytes.data(), values.size() * sizeof(float));
    return values;
  };
  for (const Entry& entry : entries_) {
    State& state = loaded[entry.parameter.name];
    if (entry.muon) {
      state.momentum = floats(take(entry.parameter.name + ".momentum_buffer", "F32", entry.parameter.shape));
    } else {
      state.exp_avg = floats(take(entry.parameter.name + ".exp_avg", "F32", entry.parameter.shape));
      state.exp_avg_sq = floats(take(entry.parameter.name + ".exp_avg_sq", "F32", entry.parameter.shape));
      std::memcpy(&state.step, take(entry.parameter.name + ".step", "I64", {}).bytes.data(), sizeof(int64_t));
    }
  }
  if (used != file.tensors.size()) {
    for (const NamedTensor& tensor : file.tensors) {
      const std::string base = tensor.name.substr(0, tensor.name.rfind('.'));
      if (!state_.count(base)) throw problem("it holds state for '" + base + "', which this optimizer does not have (or which is tagged differently)");
    }
    throw problem("it holds tensors this optimizer does not use (a parameter tagged differently?)");
  }
  int64_t steps = 0;
  if (auto found = file.metadata.find("orthojit.steps_taken"); found != file.metadata.end()) steps = std::stoll(found->second);
  state_ = std::move(loaded);
  steps_ = steps;
}

}  // namespace orthojit::runtime
