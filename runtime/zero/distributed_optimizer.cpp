// Distributed Muon + AdamW (see distributed_optimizer.h).
#include "runtime/zero/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "runtime/muon/deepspeed_config.h"
#include "runtime/muon/update_rules.h"

namespace orthojit::runtime {

struct DistributedOptimizer::Entry {
  Parameter parameter;
  bool muon = false;
  MatrixPlan matrices;
  size_t tensor = 0;       // index in plan_.tensors
  int64_t lo = 0, hi = 0;  // this rank's slice of the tensor's elements (empty: lo == hi)
  std::vector<float> momentum;               // Muon: whole (deepspeed) or slice (balanced)
  std::vector<float> exp_avg, exp_avg_sq;    // AdamW: the slice
  int64_t step = 0;
};

DistributedSettings distributed_settings(const DeepSpeedConfig& config) {
  DistributedSettings settings;
  if (config.zero.stage == 0)
    throw std::invalid_argument("zero_optimization.stage 0 is plain data parallelism: all-reduce the gradients and use the single-rank optimizer");
  settings.stage = config.zero.stage;
  if (config.zero.offload_optimizer_device == "nvme")
    throw std::invalid_argument("zero_optimization.offload_optimizer.device \"nvme\": orthojit offloads the optimizer state to host memory (\"cpu\") only");
  settings.offload_optimizer = config.zero.offload_optimizer_device == "cpu";
  return settings;
}

DistributedOptimizer::DistributedOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings, DistributedSettings distributed,
                                           Communicator& communicator)
    : settings_(std::move(settings)), distributed_(distributed), communicator_(communicator) {
  if (distributed_.stage < 1 || distributed_.stage > 3) throw std::invalid_argument("ZeRO stage must be 1, 2 or 3 (got " + std::to_string(distributed_.stage) + ")");
  if (distributed_.offload_optimizer && settings_.muon.backend == "cuda")
    throw std::invalid_argument("optimizer offload keeps the state in host memory and orthogonalizes on the host: set muon.backend to cpu (it is cuda)");
  std::vector<PlanTensor> tensors;
  for (Parameter& parameter : parameters) {
    if (!parameter.requires_grad) continue;
    if (parameter.shape.empty()) parameter.shape = {1};
    if (!parameter.data) throw std::invalid_argument("parameter '" + parameter.name + "' has no data pointer");
    Entry entry;
    entry.muon = parameter.use_muon.value_or(default_use_muon(parameter.name, parameter.shape, settings_.tagging));
    PlanTensor tensor;
    tensor.name = parameter.name;
    tensor.elements = parameter.elements();
    tensor.muon = entry.muon;
    if (entry.muon) {
      entry.matrices = plan_matrices(parameter, settings_.tensor_layout, settings_.conv_scale);
      tensor.batch = entry.matrices.batch;
      tensor.rows = entry.matrices.rows;
      tensor.cols = entry.matrices.cols;
    }
    entry.tensor = tensors.size();
    entry.parameter = std::move(parameter);
    tensors.push_back(tensor);
    entries_.push_back(std::move(entry));
  }
  PlanSettings plan_settings;
  plan_settings.world = communicator_.world();
  plan_settings.stage = distributed_.stage;
  plan_settings.mode = distributed_.mode;
  plan_settings.alignment = distributed_.alignment;
  plan_settings.gradient_bytes = 4;   // gradients are reduced in f32
  plan_settings.parameter_bytes = 4;  // and parameters gathered as f32 (exact for bf16/f16)
  plan_ = plan_partitions(tensors, plan_settings);
  const int rank = communicator_.rank();
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(rank)];
  for (Entry& entry : entries_) {
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    entry.lo = std::clamp<int64_t>(mine.begin - tensor.offset, 0, tensor.tensor.elements);
    entry.hi = std::clamp<int64_t>(mine.end - tensor.offset, 0, tensor.tensor.elements);
    const int64_t slice = entry.hi - entry.lo;
    if (slice <= 0) continue;
    if (entry.muon) entry.momentum.assign(static_cast<size_t>(distributed_.mode == OrthogonalizationMode::DeepSpeed ? tensor.tensor.elements : slice), 0.0f);
    else {
      entry.exp_avg.assign(static_cast<size_t>(slice), 0.0f);
      entry.exp_avg_sq.assign(static_cast<size_t>(slice), 0.0f);
    }
  }
  orthogonalizer_ = std::make_unique<BlockOrthogonalizer>(settings_.muon);
  if (std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.muon; })) muon_program(settings_.muon);
}

DistributedOptimizer::~DistributedOptimizer() = default;

const std::vector<float>* DistributedOptimizer::momentum(const std::string& name) const {
  for (const Entry& entry : entries_)
    if (entry.parameter.name == name) return entry.momentum.empty() ? nullptr : &entry.momentum;
  return nullptr;
}

void DistributedOptimizer::accumulate_gradients() {
  if (!have_accumulated_) accumulated_.assign(static_cast<size_t>(plan_.padded_elements), 0.0f);
  for (const Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    if (!p.grad) {
      // missing_grad = zero (DeepSpeed, Keller): nothing to add, the step takes zeros. Skipping
      // would need every rank to agree on it, so under skip every rank must give every gradient.
      if (settings_.missing_gradient == MissingGradient::Zero) continue;
      throw std::invalid_argument("parameter '" + p.name + "' has no gradient: every rank must provide every gradient (zeros if unused), "
                                  "or set missing_grad = zero");
    }
    const int64_t offset = plan_.tensors[entry.tensor].offset;
    for (int64_t i = 0; i < p.elements(); ++i) accumulated_[static_cast<size_t>(offset + i)] += static_cast<float>(load_element(p.grad_dtype, p.grad, i));
  }
  have_accumulated_ = true;
}

// The reduced gradient of this rank's partition (stage 1: also every other element, in
// accumulated_-sized `full_` kept by the caller through the return of the flat buffer).
void DistributedOptimizer::reduce_gradients(std::vector<float>& flat) {
  if (!have_accumulated_) accumulate_gradients();
  flat.swap(accumulated_);
  have_accumulated_ = false;
  const int64_t part = plan_.partition_elements;
  const float world = static_cast<float>(communicator_.world());
  if (distributed_.stage == 1) {
    communicator_.all_reduce_sum(flat.data(), plan_.padded_elements);
    if (distributed_.average_gradients)
      for (float& value : flat) value /= world;
  } else {
    std::vector<float> slice(static_cast<size_t>(part));
    communicator_.reduce_scatter_sum(flat.data(), slice.data(), part);
    if (distributed_.average_gradients)
      for (float& value : slice) value /= world;
    // Keep the flat indexing: this rank's partition at its place, the rest unused.
    std::copy(slice.begin(), slice.end(), flat.begin() + communicator_.rank() * part);
  }
}

StepReport DistributedOptimizer::step() {
  const int64_t bytes_before = communicator_.bytes_sent();
  StepReport report;
  std::vector<float> flat;
  reduce_gradients(flat);
  // A non-finite reduced gradient anywhere skips the step on every rank.
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  float bad = 0;
  int64_t first_bad = -1;
  for (int64_t i = mine.begin; i < mine.end; ++i)
    if (!std::isfinite(flat[static_cast<size_t>(i)])) {
      bad += 1;
      if (first_bad < 0) first_bad = i;
    }
  communicator_.all_reduce_sum(&bad, 1);
  if (bad > 0) {
    report.skipped = true;
    std::string where;
    if (first_bad >= 0)
      for (const Entry& entry : entries_) {
        const PlannedTensor& tensor = plan_.tensors[entry.tensor];
        if (first_bad >= tensor.offset && first_bad < tensor.offset + tensor.tensor.elements)
          where = " (on rank " + std::to_string(communicator_.rank()) + ": parameter '" + entry.parameter.name + "')";
      }
    report.reason = std::to_string(static_cast<int64_t>(bad)) + " non-finite reduced gradient element(s)" + where +
                    "; the step was skipped on every rank and no parameter or state changed";
    bytes_last_step_ = communicator_.bytes_sent() - bytes_before;
    return report;
  }
  if (distributed_.mode == OrthogonalizationMode::DeepSpeed) muon_deepspeed(flat, report);
  else muon_balanced(flat, report);
  adam(flat);
  if (distributed_.stage <= 2) all_gather_parameters();
  for (const Entry& entry : entries_) (entry.muon ? report.muon_updated : report.adam_updated) += entry.hi > entry.lo ? 1 : 0;
  bytes_last_step_ = communicator_.bytes_sent() - bytes_before;
  return report;
}

void DistributedOptimizer::muon_deepspeed(const std::vector<float>& flat, StepReport& report) {
  const int rank = communicator_.rank();
  // Whole reduced gradients of the Muon matrices this rank owns.
  std::map<size_t, std::vector<float>> whole;
  std::vector<Communicator::Transfer> sends, receives;
  for (size_t e = 0; e < entries_.size(); ++e) {
    Entry& entry = entries_[e];
    if (!entry.muon || entry.hi <= entry.lo) continue;
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    std::vector<float>& gradient = whole[e];
    gradient.assign(static_cast<size_t>(tensor.tensor.elements), 0.0f);
    if (distributed_.stage == 1) {  // all-reduced: every element is here
      std::copy(flat.begin() + tensor.offset, flat.begin() + tensor.offset + tensor.tensor.elements, gradient.begin());
      continue;
    }
    std::copy(flat.begin() + tensor.offset + entry.lo, flat.begin() + tensor.offset + entry.hi, gradient.begin() + entry.lo);
    for (int owner : tensor.owners) {
      if (owner == rank) continue;
      const RankSummary& theirs = plan_.ranks[static_cast<size_t>(owner)];
      const int64_t lo = std::clamp<int64_t>(theirs.begin - tensor.offset, 0, tensor.tensor.elements);
      const int64_t hi = std::clamp<int64_t>(theirs.end - tensor.offset, 0, tensor.tensor.elements);
      sends.push_back({owner, const_cast<float*>(flat.data() + tensor.offset + entry.lo), (entry.hi - entry.lo) * 4});
      receives.push_back({owner, gradient.data() + lo, (hi - lo) * 4});
    }
  }
  if (distributed_.stage >= 2 && communicator_.world() > 1) communicator_.exchange(sends, receives);
  for (auto& [e, gradient] : whole) {
    Entry& entry = entries_[e];
    std::vector<float> update(gradient.size()), orthogonal(gradient.size());
    muon_momentum(settings_.muon, gradient.data(), entry.momentum.data(), update.data(), static_cast<int64_t>(gradient.size()));
    const double before = orthogonalizer_->seconds();
    orthogonalizer_->orthogonalize(entry.matrices, update.data(), orthogonal.data());
    report.orthogonalize_seconds += orthogonalizer_->seconds() - before;
    apply_muon(settings_.muon, entry.matrices, entry.parameter.dtype, entry.parameter.data, orthogonal.data(), entry.lo, entry.hi);
  }
}

void DistributedOptimizer::muon_balanced(const std::vector<float>& flat, StepReport& report) {
  const int rank = communicator_.rank();
  auto slice_of = [&](const PlannedTensor& tensor, int owner, int64_t& lo, int64_t& hi) {
    const RankSummary& theirs = plan_.ranks[static_cast<size_t>(owner)];
    lo = std::clamp<int64_t>(theirs.begin - tensor.offset, 0, tensor.tensor.elements);
    hi = std::clamp<int64_t>(theirs.end - tensor.offset, 0, tensor.tensor.elements);
  };
  // 1. Momentum and U on the slices; U's pieces to each matrix's orthogonalizer.
  std::map<size_t, std::vector<float>> updates;    // slice U (owners)
  std::map<size_t, std::vector<float>> assembled;  // whole U (orthogonalizers)
  std::vector<Communicator::Transfer> sends, receives;
  for (size_t e = 0; e < entries_.size(); ++e) {
    Entry& entry = entries_[e];
    if (!entry.muon) continue;
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    const int target = tensor.orthogonalizers.front();
    if (entry.hi > entry.lo) {
      std::vector<float>& update = updates[e];
      update.resize(static_cast<size_t>(entry.hi - entry.lo));
      muon_momentum(settings_.muon, flat.data() + tensor.offset + entry.lo, entry.momentum.data(), update.data(), entry.hi - entry.lo);
      if (target != rank) sends.push_back({target, update.data(), static_cast<int64_t>(update.size()) * 4});
    }
    if (target == rank) {
      std::vector<float>& whole = assembled[e];
      whole.assign(static_cast<size_t>(tensor.tensor.elements), 0.0f);
      if (entry.hi > entry.lo) std::copy(updates[e].begin(), updates[e].end(), whole.begin() + entry.lo);
      for (int owner : tensor.owners) {
        if (owner == rank) continue;
        int64_t lo = 0, hi = 0;
        slice_of(tensor, owner, lo, hi);
        receives.push_back({owner, whole.data() + lo, (hi - lo) * 4});
      }
    }
  }
  if (communicator_.world() > 1) communicator_.exchange(sends, receives);
  // 2. NS once per matrix, O's pieces back to the owners.
  std::map<size_t, std::vector<float>> orthogonal;  // whole O (indexed like the parameter) where needed
  sends.clear();
  receives.clear();
  for (size_t e = 0; e < entries_.size(); ++e) {
    Entry& entry = entries_[e];
    if (!entry.muon) continue;
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    const int target = tensor.orthogonalizers.front();
    if (target == rank) {
      std::vector<float>& result = orthogonal[e];
      result.resize(static_cast<size_t>(tensor.tensor.elements));
      const double before = orthogonalizer_->seconds();
      orthogonalizer_->orthogonalize(entry.matrices, assembled[e].data(), result.data());
      report.orthogonalize_seconds += orthogonalizer_->seconds() - before;
      for (int owner : tensor.owners) {
        if (owner == rank) continue;
        int64_t lo = 0, hi = 0;
        slice_of(tensor, owner, lo, hi);
        sends.push_back({owner, result.data() + lo, (hi - lo) * 4});
      }
    } else if (entry.hi > entry.lo) {
      std::vector<float>& result = orthogonal[e];
      result.assign(static_cast<size_t>(tensor.tensor.elements), 0.0f);
      receives.push_back({target, result.data() + entry.lo, (entry.hi - entry.lo) * 4});
    }
  }
  if (communicator_.world() > 1) communicator_.exchange(sends, receives);
  for (auto& [e, result] : orthogonal) {
    Entry& entry = entries_[e];
    if (entry.hi > entry.lo) apply_muon(settings_.muon, entry.matrices, entry.parameter.dtype, entry.parameter.data, result.data(), entry.lo, entry.hi);
  }
}

void DistributedOptimizer::adam(const std::vector<float>& flat) {
  for (Entry& entry : entries_) {
    if (entry.muon || entry.hi <= entry.lo) continue;
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    entry.step += 1;
    adam_step(settings_.adam, entry.step, flat.data() + tensor.offset + entry.lo, entry.exp_avg.data(), entry.exp_avg_sq.data(), entry.parameter.dtype,
              entry.parameter.data, entry.lo, entry.hi - entry.lo);
  }
}

void DistributedOptimizer::all_gather_parameters() {
  const int64_t part = plan_.partition_elements;
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  std::vector<float> send(static_cast<size_t>(part), 0.0f), full(static_cast<size_t>(plan_.padded_elements));
  for (const Entry& entry : entries_) {
    const int64_t offset = plan_.tensors[entry.tensor].offset;
    for (int64_t i = entry.lo; i < entry.hi; ++i)
      send[static_cast<size_t>(offset + i - mine.begin)] = static_cast<float>(load_element(entry.parameter.dtype, entry.parameter.data, i));
  }
  communicator_.all_gather(send.data(), part * 4, full.data());
  // Every value came from a parameter of the same type, so the stores are exact.
  for (const Entry& entry : entries_) {
    const int64_t offset = plan_.tensors[entry.tensor].offset;
    for (int64_t i = 0; i < entry.parameter.elements(); ++i)
      if (i < entry.lo || i >= entry.hi) store_element(entry.parameter.dtype, entry.parameter.data, i, full[static_cast<size_t>(offset + i)]);
  }
}

void DistributedOptimizer::gather_parameters() { all_gather_parameters(); }

void DistributedOptimizer::set_gradient(const std::string& name, const void* grad, DType grad_dtype) {
  for (Entry& entry : entries_)
    if (entry.parameter.name == name) {
      entry.parameter.grad = grad;
      entry.parameter.grad_dtype = grad_dtype;
      return;
    }
  throw std::invalid_argument("no optimized parameter named '" + name + "'");
}

}  // namespace orthojit::runtime
