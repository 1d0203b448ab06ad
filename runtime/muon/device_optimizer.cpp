// The optimizer on memory-space state (see device_optimizer.h).
#include "runtime/muon/device_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "ir/muon_step.h"
#include "runtime/errors.h"
#include "runtime/muon/state_format.h"
#include "runtime/muon/update_rules.h"
#include "runtime/orthogonalize.h"

namespace orthojit::runtime {
namespace {

int64_t bytes_of(int64_t elements, DType type) { return elements * dtype_bytes(type); }

}  // namespace

std::uintptr_t DeviceOptimizer::Allocations::take(int64_t bytes) {
  addresses.reserve(addresses.size() + 1);  // so the push below cannot throw after allocating
  const std::uintptr_t address = memory->allocate(bytes);
  addresses.push_back(address);
  return address;
}

DeviceOptimizer::Allocations::~Allocations() {
  for (std::uintptr_t address : addresses) memory->free(address);
}

DeviceOptimizer::DeviceOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings, std::shared_ptr<MemorySpace> memory)
    : settings_(std::move(settings)), memory_(std::move(memory)) {
  if (!memory_) throw std::invalid_argument("DeviceOptimizer: no memory space");
  if (settings_.muon.variant != MuonVariant::Muon)
    throw std::invalid_argument(std::string("muon.variant = ") + to_string(settings_.muon.variant) +
                                ": the device optimizer (C API memory = cuda, CUDA tensors in Python) runs the fused Muon step only; NorMuon and AdaMuon run in "
                                "the host optimizer (memory = host, CPU tensors), or set muon.variant = muon");
  allocations_.memory = memory_;
  std::map<std::string, bool> seen;
  int64_t largest = 0;
  for (Parameter& parameter : parameters) {
    if (parameter.name.empty()) throw std::invalid_argument("a parameter has an empty name");
    if (seen[parameter.name]) throw std::invalid_argument("parameter '" + parameter.name + "' is given twice");
    seen[parameter.name] = true;
    if (!parameter.requires_grad) continue;
    if (parameter.shape.empty()) parameter.shape = {1};
    if (!parameter.data) throw std::invalid_argument("parameter '" + parameter.name + "' has no data pointer");
    check_address(parameter.name, parameter.data, "data");
    check_address(parameter.name, parameter.grad, "gradient");
    Entry entry;
    entry.muon = parameter.use_muon.value_or(default_use_muon(parameter.name, parameter.shape, settings_.tagging));
    if (entry.muon) entry.plan = plan_matrices(parameter, settings_.tensor_layout, settings_.conv_scale);
    entry.parameter = std::move(parameter);
    entries_.push_back(std::move(entry));
  }
  const bool any_muon = std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.muon; });
  for (Entry& entry : entries_) {
    const int64_t elements = entry.parameter.elements();
    largest = std::max(largest, elements);
    if (entry.muon) {
      entry.momentum = allocations_.take(bytes_of(elements, DType::F32));
    } else {
      entry.exp_avg = allocations_.take(bytes_of(elements, DType::F32));
      entry.exp_avg_sq = allocations_.take(bytes_of(elements, DType::F32));
    }
  }
  if (settings_.missing_gradient == MissingGradient::Zero && largest > 0) zeros_ = allocations_.take(bytes_of(largest, DType::F32));
  MuonGroupSettings muon = settings_.muon;
  if (memory_->is_device()) muon.backend = "cuda";
  orthogonalizer_ = std::make_unique<BlockOrthogonalizer>(muon);
  if (any_muon) orthogonalizer_->program();  // fail now on a program or setting that cannot compile; read once
}

DeviceOptimizer::~DeviceOptimizer() = default;

void DeviceOptimizer::check_address(const std::string& name, const void* address, const char* what) const {
  if (!address) return;
  if (const std::string problem = memory_->address_problem(reinterpret_cast<std::uintptr_t>(address)); !problem.empty())
    throw std::invalid_argument("parameter '" + name + "': the " + what + " pointer " + problem);
}

std::string DeviceOptimizer::locate_nonfinite() const {
  // Only after the device flag said so: the gradients come to the host to name the first bad
  // element exactly as HybridOptimizer::step does.
  std::vector<unsigned char> host;
  for (const Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    if (!p.grad) continue;
    const int64_t count = p.elements();
    host.resize(static_cast<size_t>(bytes_of(count, p.grad_dtype)));
    memory_->download(host.data(), reinterpret_cast<std::uintptr_t>(p.grad), static_cast<int64_t>(host.size()));
    if (const int64_t i = first_nonfinite(p.grad_dtype, host.data(), count); i >= 0) {
      const double value = load_element(p.grad_dtype, host.data(), i);
      return "parameter '" + p.name + "': gradient element " + std::to_string(i) + " is " + (std::isnan(value) ? "NaN" : "infinite") +
             "; the step was skipped and no parameter or state changed";
    }
  }
  return "a gradient held a NaN or an infinity (it was not there when copied back to name it); the step was skipped and no parameter or state changed";
}

StepReport DeviceOptimizer::step(void* stream) {
  if (!partly_loaded_.empty()) throw InvalidStateError("DeviceOptimizer::step: " + partly_loaded_);
  StepReport report;
  std::vector<TensorSpan> spans;
  for (const Entry& entry : entries_)
    if (entry.parameter.grad) spans.push_back({entry.parameter.grad_dtype, reinterpret_cast<std::uintptr_t>(entry.parameter.grad), entry.parameter.elements()});
  if (memory_->any_nonfinite(spans, stream)) {
    report.skipped = true;
    report.reason = locate_nonfinite();
    return report;
  }

  // Equal blocks of every Muon parameter batched: one compiled Muon step per (rows, cols,
  // gradient type, parameter type).
  std::vector<MuonStepTensor> muon_tensors;
  for (Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    DType grad_type = p.grad_dtype;
    std::uintptr_t grad = reinterpret_cast<std::uintptr_t>(p.grad);
    if (!p.grad) {
      ++report.without_gradient;
      if (settings_.missing_gradient == MissingGradient::Skip) continue;
      grad = zeros_;  // DeepSpeed, Keller: zeros and the full step
      grad_type = DType::F32;
    }
    if (!entry.muon) {
      entry.adam_steps += 1;
      memory_->adam_step(settings_.adam, entry.adam_steps, grad_type, grad, entry.exp_avg, entry.exp_avg_sq, p.dtype, reinterpret_cast<std::uintptr_t>(p.data),
                         p.elements(), stream);
      ++report.adam_updated;
      continue;
    }
    muon_tensors.push_back({&entry.plan, grad_type, grad, entry.momentum, p.dtype, reinterpret_cast<std::uintptr_t>(p.data)});
    ++report.muon_updated;
  }
  if (!muon_tensors.empty()) {
    const std::vector<MuonStepGroup> launches = muon_step_groups(*orthogonalizer_, settings_.muon, muon_tensors);
    const auto started = std::chrono::steady_clock::now();
    launcher_.run(launches, stream, memory_->is_device());
    if (!memory_->is_device()) report.orthogonalize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
  ++steps_;
  return report;
}

void DeviceOptimizer::set_learning_rates(double muon_lr, double adam_lr) {
  if (!(muon_lr >= 0) || !(adam_lr >= 0) || !std::isfinite(muon_lr) || !std::isfinite(adam_lr))
    throw std::invalid_argument("learning rates must be finite and >= 0");
  settings_.muon.lr = muon_lr;
  settings_.adam.lr = adam_lr;
}

DeviceOptimizer::Entry& DeviceOptimizer::find(const std::string& name) {
  for (Entry& entry : entries_)
    if (entry.parameter.name == name) return entry;
  throw std::invalid_argument("no optimized parameter named '" + name + "'");
}

void DeviceOptimizer::set_gradient(const std::string& name, const void* grad, DType grad_dtype) {
  Entry& entry = find(name);
  check_address(name, grad, "gradient");
  entry.parameter.grad = grad;
  entry.parameter.grad_dtype = grad_dtype;
}

void DeviceOptimizer::set_data(const std::string& name, void* data) {
  if (!data) throw std::invalid_argument("parameter '" + name + "': null data pointer");
  Entry& entry = find(name);
  check_address(name, data, "data");
  entry.parameter.data = data;
}

std::vector<ParameterInfo> DeviceOptimizer::parameters() const {
  std::vector<ParameterInfo> infos;
  for (const Entry& entry : entries_) infos.push_back(parameter_info(entry.parameter, entry.muon, entry.plan));
  return infos;
}

StateBytes DeviceOptimizer::state_bytes() const {
  StateBytes bytes;
  for (const Entry& entry : entries_) (entry.muon ? bytes.muon : bytes.adam) += parameter_info(entry.parameter, entry.muon, entry.plan).state_bytes;
  return bytes;
}

void DeviceOptimizer::qk_clip(const std::string& q_name, const std::string& k_name, int64_t head_rows, const std::vector<double>& s_max, double tau) {
  check_qk_clip(head_rows, s_max, tau);
  check_qk_clip_targets(find(q_name).parameter, find(k_name).parameter, head_rows, s_max.size());
  std::vector<unsigned char> host;
  for (const std::string* name : {&q_name, &k_name}) {
    Parameter& p = find(*name).parameter;
    const int64_t bytes = bytes_of(p.elements(), p.dtype);
    host.resize(static_cast<size_t>(bytes));
    memory_->download(host.data(), reinterpret_cast<std::uintptr_t>(p.data), bytes);
    qk_clip_rows(p.dtype, host.data(), p.elements() / p.shape[0], head_rows, s_max, tau);
    memory_->upload(reinterpret_cast<std::uintptr_t>(p.data), host.data(), bytes);
  }
}

std::map<std::string, HybridOptimizer::State> DeviceOptimizer::state() const {
  std::map<std::string, HybridOptimizer::State> result;
  auto fetch = [&](std::vector<float>& values, std::uintptr_t address, int64_t elements) {
    values.resize(static_cast<size_t>(elements));
    memory_->download(values.data(), address, bytes_of(elements, DType::F32));
  };
  for (const Entry& entry : entries_) {
    HybridOptimizer::State& state = result[entry.parameter.name];
    const int64_t elements = entry.parameter.elements();
    if (entry.muon) {
      fetch(state.momentum, entry.momentum, elements);
    } else {
      fetch(state.exp_avg, entry.exp_avg, elements);
      fetch(state.exp_avg_sq, entry.exp_avg_sq, elements);
      state.step = entry.adam_steps;
    }
  }
  return result;
}

std::vector<StateOwner> DeviceOptimizer::state_owners() const {
  std::vector<StateOwner> owners;
  for (const Entry& entry : entries_) owners.push_back({entry.parameter.name, entry.parameter.shape, entry.muon});
  return owners;
}

std::vector<DeviceOptimizer::StateBuffer> DeviceOptimizer::state_buffers() const {
  std::vector<StateBuffer> buffers;
  for (const Entry& entry : entries_) {
    const int64_t bytes = bytes_of(entry.parameter.elements(), DType::F32);
    if (entry.muon) {
      buffers.push_back({entry.parameter.name + ".momentum_buffer", entry.momentum, bytes});
    } else {
      buffers.push_back({entry.parameter.name + ".exp_avg", entry.exp_avg, bytes});
      buffers.push_back({entry.parameter.name + ".exp_avg_sq", entry.exp_avg_sq, bytes});
    }
  }
  return buffers;
}

void DeviceOptimizer::set_state_staging_bytes(int64_t bytes) {
  if (bytes < 1) throw std::invalid_argument("DeviceOptimizer: the state staging buffer must hold at least 1 byte, got " + std::to_string(bytes));
  staging_bytes_ = bytes;
}

namespace {

// The host buffer the state streams through: the staging size, or the largest buffer if smaller.
std::vector<unsigned char> staging_buffer(const std::vector<DeviceOptimizer::StateBuffer>& buffers, int64_t staging_bytes) {
  int64_t largest = 0;
  for (const DeviceOptimizer::StateBuffer& buffer : buffers) largest = std::max(largest, buffer.bytes);
  return std::vector<unsigned char>(static_cast<size_t>(std::min(largest, staging_bytes)));
}

}  // namespace

void DeviceOptimizer::save_state(const std::string& path, const FileProgressCallback& progress) const {
  if (!partly_loaded_.empty()) throw InvalidStateError("DeviceOptimizer::save_state: " + partly_loaded_);
  std::vector<TensorPlace> places;
  for (const TensorSource& tensor : state_file_tensors(state_owners(), nullptr, settings_.muon.variant)) places.push_back(tensor.place);
  SafetensorsWriter writer(path, places, state_file_metadata(settings_, steps_));
  writer.set_progress(progress);
  const std::vector<StateBuffer> buffers = state_buffers();  // per entry: the momentum, or both moments
  std::vector<unsigned char> staging = staging_buffer(buffers, staging_bytes_);
  // In the file's order (each AdamW step count after its moments): the writer hashes the bytes
  // as they go out, and its commit has nothing to read back (out of order, it would read the
  // whole file again for the checksum).
  size_t next = 0;
  for (const Entry& entry : entries_) {
    for (int moment = 0; moment < (entry.muon ? 1 : 2); ++moment) {
      const StateBuffer& buffer = buffers[next++];
      for (int64_t at = 0; at < buffer.bytes;) {
        const int64_t size = std::min<int64_t>(buffer.bytes - at, static_cast<int64_t>(staging.size()));
        memory_->download(staging.data(), buffer.address + static_cast<std::uintptr_t>(at), size);
        writer.write(buffer.name, static_cast<uint64_t>(at), staging.data(), static_cast<uint64_t>(size));
        at += size;
      }
    }
    if (!entry.muon) writer.write(entry.parameter.name + ".step", 0, &entry.adam_steps, sizeof entry.adam_steps);
  }
  writer.commit();  // nothing is left behind when anything above throws
}

void DeviceOptimizer::load_state(const std::string& path, const FileProgressCallback& progress) {
  SafetensorsReader reader(path);
  reader.set_progress(progress);
  const int64_t steps = check_state_file(reader.header(), path, state_owners(), settings_);
  // The whole file's checksum before any byte reaches the state. The reader keeps its descriptor,
  // so the bytes read below are the ones checked even if the path is replaced meanwhile (a save
  // renames a new file over it).
  reader.verify_checksum();
  std::vector<int64_t> adam_steps(entries_.size(), 0);
  for (size_t i = 0; i < entries_.size(); ++i)
    if (!entries_[i].muon) reader.read(*reader.header().find(entries_[i].parameter.name + ".step"), 0, &adam_steps[i], sizeof adam_steps[i]);
  const std::vector<StateBuffer> buffers = state_buffers();
  std::vector<unsigned char> staging = staging_buffer(buffers, staging_bytes_);
  try {
    for (const StateBuffer& buffer : buffers) {
      const TensorPlace& place = *reader.header().find(buffer.name);  // check_state_file found every one
      for (int64_t at = 0; at < buffer.bytes;) {
        const int64_t size = std::min<int64_t>(buffer.bytes - at, static_cast<int64_t>(staging.size()));
        reader.read(place, static_cast<uint64_t>(at), staging.data(), static_cast<uint64_t>(size));
        memory_->upload(buffer.address + static_cast<std::uintptr_t>(at), staging.data(), size);
        at += size;
      }
    }
  } catch (const std::exception& error) {
    partly_loaded_ = "the state is partly loaded from " + path + " (reading it failed after its checks passed: " + error.what() +
                     "); load a state file again before stepping or saving";
    throw std::runtime_error("DeviceOptimizer::load_state: " + partly_loaded_);
  }
  partly_loaded_.clear();
  for (size_t i = 0; i < entries_.size(); ++i)
    if (!entries_[i].muon) entries_[i].adam_steps = adam_steps[i];
  steps_ = steps;
}

}  // namespace orthojit::runtime
