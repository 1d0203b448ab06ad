// The distributed optimizer's state and settings between steps (see distributed_optimizer.h):
// the step hyperparameters, QK-clip, and the checkpoints (gather_state, load_state, the state
// file). Every function here is collective where the header says so, and decides what can fail
// on one rank before the collective that shares it.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "runtime/muon/state_format.h"
#include "runtime/muon/update_rules.h"
#include "runtime/zero/distributed_optimizer.h"
#include "runtime/zero/distributed_optimizer_entry.h"

namespace orthojit::runtime {

StepHyperparameters step_hyperparameters(const OptimizerSettings& settings) {
  StepHyperparameters values;
  values.muon_lr = settings.muon.lr;
  values.muon_momentum = settings.muon.momentum;
  values.muon_weight_decay = settings.muon.weight_decay;
  values.adam_lr = settings.adam.lr;
  values.adam_beta1 = settings.adam.beta1;
  values.adam_beta2 = settings.adam.beta2;
  values.adam_eps = settings.adam.eps;
  values.adam_weight_decay = settings.adam.weight_decay;
  return values;
}

StepHyperparameters DistributedOptimizer::hyperparameters() const { return step_hyperparameters(settings_); }

std::vector<ParameterInfo> DistributedOptimizer::parameters() const {
  const bool balanced = distributed_.mode == OrthogonalizationMode::Balanced;
  std::vector<ParameterInfo> infos;
  for (const Entry& entry : entries_) {
    ParameterInfo info = parameter_info(entry.parameter, entry.muon, entry.matrices);
    const int64_t slice = entry.hi - entry.lo;
    info.state_bytes = slice <= 0 ? 0 : entry.muon ? 4 * (balanced ? slice : entry.parameter.elements()) : 8 * slice;
    infos.push_back(std::move(info));
  }
  return infos;
}

StateBytes DistributedOptimizer::state_bytes() const {
  StateBytes bytes;
  for (const ParameterInfo& info : parameters()) (info.muon ? bytes.muon : bytes.adam) += info.state_bytes;
  return bytes;
}

void DistributedOptimizer::set_hyperparameters(const StepHyperparameters& values) {
  // The ranges of the settings keys (optimizer_settings.h), all checked before any is set.
  auto check = [](const char* key, double value, double least, bool open_below, double below) {
    const bool ok = std::isfinite(value) && (open_below ? value > least : value >= least) && value < below;
    if (ok) return;
    std::string range = std::string(open_below ? "> " : ">= ") + std::to_string(least);
    if (std::isfinite(below)) range += " and < " + std::to_string(below);
    throw std::invalid_argument(std::string(key) + " = " + std::to_string(value) + ": expected a finite number " + range + "; no hyperparameter changed");
  };
  const double inf = std::numeric_limits<double>::infinity();
  check("muon.lr", values.muon_lr, 0, false, inf);
  check("muon.momentum", values.muon_momentum, 0, false, 1);
  check("muon.weight_decay", values.muon_weight_decay, 0, false, inf);
  check("adam.lr", values.adam_lr, 0, false, inf);
  check("adam.beta1", values.adam_beta1, 0, false, 1);
  check("adam.beta2", values.adam_beta2, 0, false, 1);
  check("adam.eps", values.adam_eps, 0, true, inf);
  check("adam.weight_decay", values.adam_weight_decay, 0, false, inf);
  // The element rules and the compiled Muon steps take these as arguments at every launch
  // (muon_step_launcher.h): nothing compiled depends on them.
  settings_.muon.lr = values.muon_lr;
  settings_.muon.momentum = values.muon_momentum;
  settings_.muon.weight_decay = values.muon_weight_decay;
  settings_.adam.lr = values.adam_lr;
  settings_.adam.beta1 = values.adam_beta1;
  settings_.adam.beta2 = values.adam_beta2;
  settings_.adam.eps = values.adam_eps;
  settings_.adam.weight_decay = values.adam_weight_decay;
}

std::vector<StateOwner> DistributedOptimizer::state_owners() const {
  std::vector<StateOwner> owners;
  for (const Entry& entry : entries_) owners.push_back({entry.parameter.name, entry.parameter.shape, entry.muon, entry.matrices});
  return owners;
}

namespace {
// A buffer of the step's memory space for the length of one call.
struct ScratchBuffer {
  MemorySpace& memory;
  std::uintptr_t address;
  ScratchBuffer(MemorySpace& space, int64_t floats) : memory(space), address(space.allocate(std::max<int64_t>(floats, 1) * 4)) {}
  ~ScratchBuffer() { memory.free(address); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
};
}  // namespace

std::vector<double> DistributedOptimizer::all_gather_doubles(const std::vector<double>& values) {
  const int world = communicator_.world();
  if (world <= 1 || values.empty()) return values;
  const int64_t bytes = static_cast<int64_t>(values.size() * sizeof(double));
  ScratchBuffer mine(*memory_, bytes / 4), every(*memory_, world * (bytes / 4));
  memory_->upload(mine.address, values.data(), bytes);
  communicator_.all_gather(reinterpret_cast<const void*>(mine.address), bytes, reinterpret_cast<void*>(every.address));
  std::vector<double> all(values.size() * static_cast<size_t>(world));
  memory_->download(all.data(), every.address, bytes * world);
  return all;
}

void DistributedOptimizer::qk_clip(const std::string& q_name, const std::string& k_name, int64_t head_rows, const std::vector<double>& s_max, double tau) {
  auto find = [&](const std::string& name) -> Entry& {
    for (Entry& entry : entries_)
      if (entry.parameter.name == name) return entry;
    throw std::invalid_argument("QK-clip: no optimized parameter named '" + name + "'");
  };
  // Checked everywhere before any transfer whose size depends on the arguments: the failures and
  // the S_max lengths (n and n², equal on every rank exactly when N·Σn² = (Σn)²) in one all-reduce.
  std::exception_ptr failure;
  try {
    check_qk_clip(head_rows, s_max, tau);
    check_qk_clip_targets(find(q_name).parameter, find(k_name).parameter, head_rows, s_max.size());
  } catch (...) {
    failure = std::current_exception();
  }
  const int world = communicator_.world();
  if (world > 1) {
    const float heads = static_cast<float>(s_max.size());
    float sums[3] = {failure ? 1.0f : 0.0f, heads, heads * heads};
    communicator_.all_reduce_sum(sums, 3);
    if (failure) std::rethrow_exception(failure);
    if (sums[0] > 0)
      throw std::invalid_argument("QK-clip failed on " + std::to_string(static_cast<int>(sums[0])) +
                                  " other rank(s) (each says why in its own error); no rank changed anything");
    if (static_cast<double>(world) * sums[2] != static_cast<double>(sums[1]) * sums[1])
      throw std::invalid_argument("QK-clip: the ranks gave S_max of different lengths (this rank " + std::to_string(s_max.size()) +
                                  "); every rank must give one value per head; no rank changed anything");
  } else if (failure) {
    std::rethrow_exception(failure);
  }
  // Every rank's S_max (f64, whole bytes: the largest is exactly one of the values given), through
  // the step's memory space so that device engines move it.
  std::vector<double> maxima = s_max;
  if (world > 1 && !s_max.empty()) {
    communicator_.set_stream(nullptr);
    const std::vector<double> all = all_gather_doubles(s_max);
    for (int r = 0; r < world; ++r)
      for (size_t h = 0; h < s_max.size(); ++h) maxima[h] = std::max(maxima[h], all[static_cast<size_t>(r) * s_max.size() + h]);
  }
  std::vector<unsigned char> host;
  for (const std::string* name : {&q_name, &k_name}) {
    Parameter& p = find(*name).parameter;
    const int64_t row_length = p.elements() / p.shape[0];
    if (!memory_->is_device()) {
      qk_clip_rows(p.dtype, p.data, row_length, head_rows, maxima, tau);
      continue;
    }
    const int64_t bytes = p.elements() * dtype_bytes(p.dtype);
    host.resize(static_cast<size_t>(bytes));
    memory_->download(host.data(), reinterpret_cast<std::uintptr_t>(p.data), bytes);
    qk_clip_rows(p.dtype, host.data(), row_length, head_rows, maxima, tau);
    memory_->upload(reinterpret_cast<std::uintptr_t>(p.data), host.data(), bytes);
  }
}

void DistributedOptimizer::copy_state_to_partition(std::uintptr_t first, std::uintptr_t second, int64_t from, int64_t count) const {
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  const bool balanced = distributed_.mode == OrthogonalizationMode::Balanced;
  for (const Entry& entry : entries_) {
    // The entry's slice in partition coordinates, cut to [from, from + count).
    const int64_t place = plan_.tensors[entry.tensor].offset + entry.lo - mine.begin;
    const int64_t lo = std::max(place, from), hi = std::min(place + entry.hi - entry.lo, from + count);
    if (hi <= lo) continue;
    const int64_t skip = lo - place;  // elements of the slice before the cut
    if (entry.muon) {
      memory_->copy(at(first, lo - from), at(entry.momentum, (balanced ? 0 : entry.lo) + skip), (hi - lo) * 4, nullptr);
    } else {
      memory_->copy(at(first, lo - from), at(entry.exp_avg, skip), (hi - lo) * 4, nullptr);
      memory_->copy(at(second, lo - from), at(entry.exp_avg_sq, skip), (hi - lo) * 4, nullptr);
    }
  }
}

// AdamW's step counts: the first owner of each tensor gives its count, in two f32 halves (exact
// for counts below 2^42), through a host all-reduce (staged by device engines). steps_ is the
// same on every rank.
std::vector<int64_t> DistributedOptimizer::adam_step_counts() {
  std::vector<float> halves(entries_.size() * 2, 0.0f);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    if (entry.muon || plan_.tensors[entry.tensor].owners.empty() || plan_.tensors[entry.tensor].owners.front() != communicator_.rank()) continue;
    halves[2 * i] = static_cast<float>(entry.step >> 18);
    halves[2 * i + 1] = static_cast<float>(entry.step & ((int64_t{1} << 18) - 1));
  }
  if (communicator_.world() > 1) communicator_.all_reduce_sum(halves.data(), static_cast<int64_t>(halves.size()));
  std::vector<int64_t> counts(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) counts[i] = (static_cast<int64_t>(halves[2 * i]) << 18) + static_cast<int64_t>(halves[2 * i + 1]);
  return counts;
}

// The partitioned state, laid like the parameters' flat buffer: each rank puts its slice of every
// tensor's state at the tensor's place in its partition, and one all-gather per buffer gives
// every rank the whole of it (with a root: every other rank sends its two slices to the root,
// which receives them at their places). deepspeed mode: the owners of a matrix hold identical
// whole momenta; each contributes its slice.
std::map<std::string, HybridOptimizer::State> DistributedOptimizer::gather_state(std::optional<int> root) {
  const int world = communicator_.world(), rank = communicator_.rank();
  if (root && (*root < 0 || *root >= world))
    throw std::invalid_argument("gather_state: root rank " + std::to_string(*root) + " is not in 0.." + std::to_string(world - 1));
  communicator_.set_stream(nullptr);
  const int64_t part = plan_.partition_elements, padded = plan_.padded_elements;
  ScratchBuffer first_slice(*memory_, part), second_slice(*memory_, part);
  copy_state_to_partition(first_slice.address, second_slice.address, 0, part);
  const bool receives = !root || *root == rank;
  std::vector<float> first(receives ? static_cast<size_t>(padded) : 0), second(receives ? static_cast<size_t>(padded) : 0);
  if (!root) {
    ScratchBuffer gathered(*memory_, padded);
    communicator_.all_gather(reinterpret_cast<const void*>(first_slice.address), part * 4, reinterpret_cast<void*>(gathered.address));
    memory_->download(first.data(), gathered.address, padded * 4);
    communicator_.all_gather(reinterpret_cast<const void*>(second_slice.address), part * 4, reinterpret_cast<void*>(gathered.address));
    memory_->download(second.data(), gathered.address, padded * 4);
  } else if (!receives) {
    communicator_.exchange({{*root, reinterpret_cast<void*>(first_slice.address), part * 4}, {*root, reinterpret_cast<void*>(second_slice.address), part * 4}},
                           {});
  } else {
    ScratchBuffer gathered_first(*memory_, padded), gathered_second(*memory_, padded);
    std::vector<Communicator::Transfer> transfers;
    for (int r = 0; r < world; ++r) {
      const std::uintptr_t place = static_cast<std::uintptr_t>(r * part * 4);
      if (r == rank) {
        memory_->copy(gathered_first.address + place, first_slice.address, part * 4, nullptr);
        memory_->copy(gathered_second.address + place, second_slice.address, part * 4, nullptr);
        continue;
      }
      transfers.push_back({r, reinterpret_cast<void*>(gathered_first.address + place), part * 4});
      transfers.push_back({r, reinterpret_cast<void*>(gathered_second.address + place), part * 4});
    }
    if (!transfers.empty()) communicator_.exchange({}, transfers);
    memory_->download(first.data(), gathered_first.address, padded * 4);
    memory_->download(second.data(), gathered_second.address, padded * 4);
  }
  const std::vector<int64_t> counts = adam_step_counts();
  std::map<std::string, HybridOptimizer::State> state;
  if (!receives) return state;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    const int64_t offset = plan_.tensors[entry.tensor].offset, elements = entry.parameter.elements();
    HybridOptimizer::State& values = state[entry.parameter.name];
    auto piece = [&](const std::vector<float>& from) { return std::vector<float>(from.begin() + offset, from.begin() + offset + elements); };
    if (entry.muon) {
      values.momentum = piece(first);
    } else {
      values.exp_avg = piece(first);
      values.exp_avg_sq = piece(second);
      values.step = counts[i];
    }
  }
  return state;
}

void DistributedOptimizer::require_on_every_rank(const std::string& problem, const std::string& doing) {
  agree(problem.empty() ? nullptr : std::make_exception_ptr(std::invalid_argument(problem)), doing);
}

void DistributedOptimizer::install_state(const std::vector<StatePiece>& pieces, int64_t steps_taken) {
  const bool balanced = distributed_.mode == OrthogonalizationMode::Balanced;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& entry = entries_[i];
    if (entry.hi <= entry.lo) continue;
    const int64_t count = entry.hi - entry.lo;
    if (entry.muon) {
      memory_->upload(entry.momentum, pieces[i].first, (balanced ? count : entry.parameter.elements()) * 4);
    } else {
      memory_->upload(entry.exp_avg, pieces[i].first, count * 4);
      memory_->upload(entry.exp_avg_sq, pieces[i].second, count * 4);
      entry.step = pieces[i].step;
    }
  }
  steps_ = steps_taken;
}

void DistributedOptimizer::load_state(const std::map<std::string, HybridOptimizer::State>& state, int64_t steps_taken) {
  // Everything checked on every rank before any rank changes anything.
  std::exception_ptr failure;
  try {
    auto mismatch = [](const std::string& what) { return std::runtime_error("optimizer state does not match this optimizer: " + what + "; nothing was loaded"); };
    if (steps_taken < 0) throw mismatch("steps taken " + std::to_string(steps_taken));
    for (const auto& [name, values] : state)
      if (std::none_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.parameter.name == name; }))
        throw mismatch("it holds state for '" + name + "', which this optimizer does not have");
    for (const Entry& entry : entries_) {
      const std::string& name = entry.parameter.name;
      const auto found = state.find(name);
      if (found == state.end()) throw mismatch("it has no state for '" + name + "'");
      const HybridOptimizer::State& values = found->second;
      const size_t elements = static_cast<size_t>(entry.parameter.elements());
      auto expect = [&](const char* key, const std::vector<float>& buffer, size_t size) {
        if (buffer.size() != size)
          throw mismatch("'" + name + "." + key + "' has " + std::to_string(buffer.size()) + " elements, expected " + std::to_string(size));
      };
      if (!values.second_moment.empty() || values.variant_step != 0)
        throw mismatch("'" + name + "' has a Muon variant's second moment (NorMuon or AdaMuon); the distributed optimizer runs Muon only");
      expect("momentum_buffer", values.momentum, entry.muon ? elements : 0);
      expect("exp_avg", values.exp_avg, entry.muon ? 0 : elements);
      expect("exp_avg_sq", values.exp_avg_sq, entry.muon ? 0 : elements);
      if (values.step < 0 || (entry.muon && values.step != 0)) throw mismatch("'" + name + ".step' is " + std::to_string(values.step));
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, "loading the optimizer state");
  const bool balanced = distributed_.mode == OrthogonalizationMode::Balanced;
  std::vector<StatePiece> pieces(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    const HybridOptimizer::State& values = state.at(entry.parameter.name);
    if (entry.muon) pieces[i].first = values.momentum.data() + (balanced ? entry.lo : 0);
    else pieces[i] = {values.exp_avg.data() + entry.lo, values.exp_avg_sq.data() + entry.lo, values.step};
  }
  install_state(pieces, steps_taken);
}

void DistributedOptimizer::save_state(const std::string& path, const std::map<std::string, std::string>& extra_metadata,
                                      const FileProgressCallback& progress) {
  constexpr int kRoot = 0;
  const int world = communicator_.world(), rank = communicator_.rank();
  communicator_.set_stream(nullptr);
  const std::vector<int64_t> counts = adam_step_counts();

  // Rank 0 opens the file; a failure there is kept, and the chunks still flow so that no rank
  // waits forever, then every rank learns of it.
  std::exception_ptr failure;
  std::optional<SafetensorsWriter> writer;
  if (rank == kRoot) {
    try {
      std::vector<TensorPlace> places;
      for (const TensorSource& tensor : state_file_tensors(state_owners(), nullptr, settings_.muon.variant)) places.push_back(tensor.place);
      std::map<std::string, std::string> metadata = state_file_metadata(settings_, steps_);
      for (const auto& [key, value] : extra_metadata)
        if (!metadata.emplace(key, value).second || key == kSafetensorsChecksumKey)
          throw std::invalid_argument("save_state: the metadata key '" + key + "' is the state file's own; nothing was written");
      writer.emplace(path, places, metadata);
      writer->set_progress(progress);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // Tensor by tensor in the file's order (entries_, each one's tensors as state_file_tensors lays
  // them out), so that rank 0 writes the file front to back and hashes it as it writes (beside the
  // write, for large pieces) instead of reading the file back at commit. A piece lies in one rank's
  // partition and holds at most a chunk: that rank copies it out of its state and sends it. Both
  // sides decide from the plan, so sends and receives pair up; padding is never sent.
  const int64_t part = plan_.partition_elements;
  const int64_t chunk = std::clamp<int64_t>(distributed_.bucket_elements / world, 1, std::max<int64_t>(part, 1));
  // The chunks' buffers, allocated by every rank before any chunk moves: a rank that cannot
  // allocate them stops every rank here (a device nearly full), not rank 0 inside a receive.
  std::optional<ScratchBuffer> first, second, received;
  std::vector<float> host;
  std::exception_ptr allocation;
  try {
    first.emplace(*memory_, chunk);
    second.emplace(*memory_, chunk);
    if (rank == kRoot) {
      received.emplace(*memory_, chunk);
      host.resize(static_cast<size_t>(chunk));
    }
  } catch (...) {
    allocation = std::current_exception();
  }
  agree(allocation, "allocating the state file's chunk buffers (" + std::to_string(chunk * 4) + " bytes each)");
  // Rank 0's writes; after a failure the pieces still flow (no rank waits forever) and are dropped.
  auto write = [&](const std::string& name, uint64_t offset, const void* data, uint64_t bytes) {
    if (failure) return;
    try {
      writer->write(name, offset, data, bytes);
    } catch (...) {
      failure = std::current_exception();
      writer.reset();  // removes the temporary file
    }
  };
  auto move_tensor = [&](const Entry& entry, bool is_second) {
    const int64_t offset = plan_.tensors[entry.tensor].offset, end = offset + entry.parameter.elements();
    const std::string name = entry.parameter.name + (entry.muon ? ".momentum_buffer" : is_second ? ".exp_avg_sq" : ".exp_avg");
    for (int64_t at = offset; at < end;) {
      const int owner = static_cast<int>(at / part);
      const int64_t count = std::min({end, (owner + 1) * part, at + chunk}) - at;
      if (rank == owner) copy_state_to_partition(first->address, second->address, at - owner * part, count);
      const std::uintptr_t mine = is_second ? second->address : first->address;
      if (rank == kRoot) {
        if (owner == kRoot) {
          memory_->download(host.data(), mine, count * 4);
        } else {
          communicator_.exchange({}, {{owner, reinterpret_cast<void*>(received->address), count * 4}});
          memory_->download(host.data(), received->address, count * 4);
        }
        write(name, static_cast<uint64_t>(at - offset) * 4, host.data(), static_cast<uint64_t>(count) * 4);
      } else if (rank == owner) {
        communicator_.exchange({{kRoot, reinterpret_cast<void*>(mine), count * 4}}, {});
      }
      at += count;
    }
  };
  for (size_t i = 0; i < entries_.size(); ++i) {
    move_tensor(entries_[i], false);
    if (entries_[i].muon) continue;
    move_tensor(entries_[i], true);
    if (rank == kRoot) write(entries_[i].parameter.name + ".step", 0, &counts[i], sizeof(int64_t));
  }
  if (rank == kRoot && !failure) {
    try {
      writer->commit();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree(failure, "writing the optimizer state file on rank 0");
}

void DistributedOptimizer::load_state(const std::string& path, const std::string& refusal, const FileProgressCallback& progress) {
  // Every rank reads its own part; rank 0 checks the checksum of the whole file, and every rank
  // checks that it read the file rank 0 checked (the same checksum and size: not a file renamed
  // over the path in between, nor another copy of it). Nothing changes until every rank has read
  // its part.
  const bool balanced = distributed_.mode == OrthogonalizationMode::Balanced;
  std::vector<std::vector<float>> firsts(entries_.size()), seconds(entries_.size());
  std::vector<StatePiece> pieces(entries_.size());
  int64_t steps = 0;
  std::exception_ptr failure;
  std::optional<SafetensorsReader> reader;
  try {
    if (!refusal.empty()) throw std::invalid_argument(refusal);
    reader.emplace(path);
    reader->set_progress(progress);
    steps = check_state_file(reader->header(), path, state_owners(), settings_);
    auto read = [&](const std::string& name, int64_t first_element, int64_t count, void* out) {
      reader->read(*reader->header().find(name), static_cast<uint64_t>(first_element) * 4, out, static_cast<uint64_t>(count) * 4);
    };
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& entry = entries_[i];
      const std::string& name = entry.parameter.name;
      if (entry.hi <= entry.lo) continue;
      const int64_t count = entry.hi - entry.lo;
      if (entry.muon) {
        const int64_t first = balanced ? entry.lo : 0, size = balanced ? count : entry.parameter.elements();
        firsts[i].resize(static_cast<size_t>(size));
        read(name + ".momentum_buffer", first, size, firsts[i].data());
      } else {
        firsts[i].resize(static_cast<size_t>(count));
        seconds[i].resize(static_cast<size_t>(count));
        read(name + ".exp_avg", entry.lo, count, firsts[i].data());
        read(name + ".exp_avg_sq", entry.lo, count, seconds[i].data());
        reader->read(*reader->header().find(name + ".step"), 0, &pieces[i].step, sizeof(int64_t));
        if (pieces[i].step < 0)
          throw std::runtime_error("optimizer state " + path + " does not match the parameters: '" + name + ".step' is " + std::to_string(pieces[i].step) +
                                   "; nothing was loaded");
      }
      pieces[i].first = firsts[i].data();
      pieces[i].second = seconds[i].data();
    }
    if (communicator_.rank() == 0) reader->verify_checksum();
  } catch (...) {
    failure = std::current_exception();
  }
  // The file each rank read: its checksum's first 12 hex digits (exact in a double) and its data
  // size, against rank 0's. A rank that failed gives NaN (its own error decides below).
  std::vector<double> identity = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  if (!failure) {
    const std::optional<std::string>& checksum = reader->header().checksum;
    double digits = -1;  // no checksum, or not hex (rank 0's check refuses it)
    if (checksum && checksum->size() >= 12 && std::all_of(checksum->begin(), checksum->begin() + 12, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }))
      digits = static_cast<double>(std::stoull(checksum->substr(0, 12), nullptr, 16));
    identity = {digits, static_cast<double>(reader->header().data_bytes)};
  }
  const std::vector<double> every = all_gather_doubles(identity);
  if (!failure && !std::isnan(every[0]) && (every[0] != identity[0] || every[1] != identity[1]))
    failure = std::make_exception_ptr(std::runtime_error("optimizer state " + path + ": rank " + std::to_string(communicator_.rank()) +
                                                         " read another file than rank 0 (another checksum or size: was it replaced while loading, "
                                                         "or does this rank see another copy?); nothing was loaded"));
  agree(failure, "reading the optimizer state file '" + path + "'");
  install_state(pieces, steps);
}

}  // namespace orthojit::runtime
