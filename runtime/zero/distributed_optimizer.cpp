// Distributed Muon + AdamW (see distributed_optimizer.h).
#include "runtime/zero/distributed_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
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
  // Addresses in memory_ (0: not held here), f32.
  std::uintptr_t momentum = 0;              // Muon: whole (deepspeed) or slice (balanced)
  std::uintptr_t exp_avg = 0, exp_avg_sq = 0;  // AdamW: the slice
  // balanced: the matrices of the batch this rank orthogonalizes (ascending), their U assembled
  // and their O, packed one after another; U and O of this rank's slice.
  std::vector<int64_t> mine;
  std::uintptr_t update = 0, assembled = 0, result = 0, slice_result = 0;
  int64_t step = 0;
};

std::uintptr_t DistributedOptimizer::Buffers::take(int64_t floats) {
  addresses.reserve(addresses.size() + 1);  // so the push below cannot throw after allocating
  const std::uintptr_t address = memory->allocate(std::max<int64_t>(floats, 1) * 4);
  addresses.push_back(address);
  return address;
}

DistributedOptimizer::Buffers::~Buffers() {
  for (std::uintptr_t address : addresses) memory->free(address);
}

DistributedSettings distributed_settings(const DeepSpeedConfig& config) {
  DistributedSettings settings;
  if (config.zero.stage == 0)
    throw std::invalid_argument("zero_optimization.stage 0 is plain data parallelism: all-reduce the gradients and use the single-rank optimizer");
  settings.stage = config.zero.stage;
  if (config.zero.offload_optimizer_device == "nvme")
    throw std::invalid_argument("zero_optimization.offload_optimizer.device \"nvme\": orthojit offloads the optimizer state to host memory (\"cpu\") only");
  settings.offload_optimizer = config.zero.offload_optimizer_device == "cpu";
  // DeepSpeed clips the flat buffer after Muon has put its update there, so the normalized
  // update is divided by a norm it contributes to (a defect not copied): here the gradient is
  // clipped, as gradient_clipping means for every other optimizer.
  settings.max_gradient_norm = config.gradient_clipping;
  return settings;
}

// Every rank must pass the same parameters (names, sizes, tags, order): the partition plan is
// computed on each rank from its own list, and lists that differ made transfers of other sizes
// (a crash inside gloo or MPI_ERR_TRUNCATE) or, worse, a run with no error at all (a tag or a shape
// of the same size that differs). One all-reduce at construction compares a hash of the list:
// 16 chunks of 4 bits, each summed with its square, are all equal across the N ranks exactly when
// N·Σx² = (Σx)² for every chunk (exact in f32 up to 74565 ranks: Σx² <= 225·N < 2^24).
void DistributedOptimizer::require_same_parameters_on_every_rank(const std::vector<PlanTensor>& tensors, std::exception_ptr failure) {
  if (communicator_.world() <= 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  uint64_t hash = 1469598103934665603ull;  // FNV-1a, 64-bit
  auto mix = [&](const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) hash = (hash ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  };
  int64_t elements = 0;
  for (const PlanTensor& tensor : tensors) {
    mix(tensor.name.data(), tensor.name.size() + 1);
    const int64_t fields[5] = {tensor.elements, tensor.muon ? 1 : 0, tensor.batch, tensor.rows, tensor.cols};
    mix(fields, sizeof fields);
    elements += tensor.elements;
  }
  float sums[33];
  for (int chunk = 0; chunk < 16; ++chunk) {
    const float x = static_cast<float>((hash >> (4 * chunk)) & 15u);
    sums[2 * chunk] = x;
    sums[2 * chunk + 1] = x * x;
  }
  sums[32] = failure ? 1.0f : 0.0f;  // the ranks that cannot go on (their list is incomplete)
  communicator_.all_reduce_sum(sums, 33);
  if (failure) std::rethrow_exception(failure);
  if (sums[32] > 0)
    throw std::invalid_argument("the optimizer could not be built on " + std::to_string(static_cast<int>(sums[32])) +
                                " other rank(s) (each says why in its own error); nothing was built on this rank either");
  const double world = communicator_.world();
  for (int chunk = 0; chunk < 16; ++chunk)
    if (world * sums[2 * chunk + 1] != static_cast<double>(sums[2 * chunk]) * sums[2 * chunk])
      throw std::invalid_argument("the ranks were given different parameters: every rank must pass the same names, shapes, Muon tags and order "
                                  "(this rank, " + std::to_string(communicator_.rank()) + ", has " + std::to_string(tensors.size()) +
                                  " trainable tensors of " + std::to_string(elements) + " elements in all; compare the other ranks' lists)");
}

void DistributedOptimizer::agree(std::exception_ptr failure, const std::string& doing) {
  float failed = failure ? 1.0f : 0.0f;
  if (communicator_.world() > 1) communicator_.all_reduce_sum(&failed, 1);
  if (failure) std::rethrow_exception(failure);  // this rank's own error, as it was thrown
  if (failed > 0)
    throw std::runtime_error(doing + " failed on " + std::to_string(static_cast<int>(failed)) +
                             " other rank(s) (each says why in its own error); this rank stopped with them and changed nothing");
}

DistributedOptimizer::DistributedOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings, DistributedSettings distributed,
                                           Communicator& communicator, std::shared_ptr<MemorySpace> memory)
    : settings_(std::move(settings)), distributed_(distributed), communicator_(communicator), memory_(std::move(memory)) {
  if (!memory_) throw std::invalid_argument("DistributedOptimizer: no memory space");
  if (settings_.muon.variant != MuonVariant::Muon)
    throw std::invalid_argument(std::string("muon.variant = ") + to_string(settings_.muon.variant) +
                                ": the distributed optimizer runs Muon's update only (its owners hold no second-moment state); use the single-process "
                                "optimizer for NorMuon and AdaMuon, or set muon.variant = muon");
  buffers_.memory = memory_;
  if (distributed_.stage < 1 || distributed_.stage > 3) throw std::invalid_argument("ZeRO stage must be 1, 2 or 3 (got " + std::to_string(distributed_.stage) + ")");
  if (!(distributed_.max_gradient_norm >= 0) || !std::isfinite(distributed_.max_gradient_norm))
    throw std::invalid_argument("max_gradient_norm must be a finite number >= 0 (0: no clipping), got " + std::to_string(distributed_.max_gradient_norm));
  if (distributed_.offload_optimizer && settings_.muon.backend == "cuda")
    throw std::invalid_argument("optimizer offload keeps the state in host memory and orthogonalizes on the host: set muon.backend to cpu (it is cuda)");
  if (memory_->is_device()) {
    if (distributed_.offload_optimizer)
      throw std::invalid_argument("optimizer offload keeps the state in host memory, but the parameters are in CUDA memory: pass CPU tensors to offload, "
                                  "or leave offload off to keep the state on the device");
    if (!communicator_.accepts_device_buffers())
      throw std::invalid_argument("parameters in CUDA memory need a communicator that moves device buffers: engine nccl (this one is " +
                                  communicator_.describe() + ")");
    settings_.muon.backend = "cuda";  // the state is on the device; so is the iteration
  }
  // What can differ between ranks (a pointer the driver does not know here) is reported through
  // the parameter-list check, the first collective, so that no rank waits for one that threw.
  std::vector<PlanTensor> tensors;
  std::exception_ptr failure;
  try {
  for (Parameter& parameter : parameters) {
    if (!parameter.requires_grad) continue;
    if (parameter.shape.empty()) parameter.shape = {1};
    if (!parameter.data) throw std::invalid_argument("parameter '" + parameter.name + "' has no data pointer");
    for (const auto& [address, what] : {std::pair<const void*, const char*>{parameter.data, "data"}, {parameter.grad, "gradient"}})
      if (address)
        if (const std::string problem = memory_->address_problem(reinterpret_cast<std::uintptr_t>(address)); !problem.empty())
          throw std::invalid_argument("parameter '" + parameter.name + "': the " + what + " pointer " + problem);
    Entry entry;
    entry.muon = parameter.use_muon.value_or(default_use_muon(parameter.name, parameter.shape, settings_.tagging));
    if (!entry.muon && (parameter.layout != MatrixLayout::Auto || !parameter.row_splits.empty() || parameter.head_rows != 0))
      throw std::invalid_argument("parameter '" + parameter.name + "' is tagged AdamW but has matrix options (layout, row_splits, head_rows), which "
                                  "split Muon matrices: tag it Muon (use_muon) or drop its matrix options");
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
  } catch (...) {
    failure = std::current_exception();
  }
  require_same_parameters_on_every_rank(tensors, failure);
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
  const bool balanced = distributed_.mode == OrthogonalizationMode::Balanced;
  // The allocations and the compiles may fail on one rank only (memory, a shape one rank
  // compiles): decided together, below.
  std::exception_ptr build_failure;
  try {
  for (Entry& entry : entries_) {
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    entry.lo = std::clamp<int64_t>(mine.begin - tensor.offset, 0, tensor.tensor.elements);
    entry.hi = std::clamp<int64_t>(mine.end - tensor.offset, 0, tensor.tensor.elements);
    const int64_t slice = entry.hi - entry.lo, whole = tensor.tensor.elements;
    if (entry.muon && balanced) {
      for (int64_t b = 0; b < entry.matrices.batch; ++b)
        if (tensor.matrix_orthogonalizers[static_cast<size_t>(b)] == rank) entry.mine.push_back(b);
      if (!entry.mine.empty()) {
        const int64_t packed = static_cast<int64_t>(entry.mine.size()) * entry.matrices.rows * entry.matrices.cols;
        entry.assembled = buffers_.take(packed);
        entry.result = buffers_.take(packed);
      }
    }
    if (slice <= 0) continue;
    if (entry.muon) {
      entry.momentum = buffers_.take(balanced ? slice : whole);
      if (balanced) {
        entry.update = buffers_.take(slice);
        entry.slice_result = buffers_.take(slice);
      }
    } else {
      entry.exp_avg = buffers_.take(slice);
      entry.exp_avg_sq = buffers_.take(slice);
    }
  }
  flat_ = buffers_.take(plan_.padded_elements);
  slice_ = buffers_.take(plan_.partition_elements);
  orthogonalizer_ = std::make_unique<BlockOrthogonalizer>(settings_.muon);
  // Every kernel the steps run, compiled now (the program read once, update_rules.h): a program,
  // setting or shape that cannot compile fails here on every rank, not in a step on one rank
  // while the others wait in its collectives.
  compile_kernels();
  } catch (...) {
    build_failure = std::current_exception();
  }
  agree(build_failure, "building the distributed optimizer (allocating its buffers, compiling its Muon kernels)");
}

std::vector<MuonStepTensor> DistributedOptimizer::owned_muon_steps() const {
  std::vector<MuonStepTensor> owned;
  for (const Entry& entry : entries_) {
    if (!entry.muon || entry.hi <= entry.lo) continue;
    owned.push_back({&entry.matrices, DType::F32, at(flat_, plan_.tensors[entry.tensor].offset), entry.momentum, entry.parameter.dtype,
                     reinterpret_cast<std::uintptr_t>(entry.parameter.data)});
  }
  return owned;
}

void DistributedOptimizer::compile_kernels() {
  if (std::none_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.muon; })) return;
  orthogonalizer_->program();
  if (distributed_.mode == OrthogonalizationMode::DeepSpeed) {
    (void)muon_step_groups(*orthogonalizer_, settings_.muon, owned_muon_steps());  // compiles and caches them
    return;
  }
  for (const Entry& entry : entries_) {  // balanced: the batches this rank orthogonalizes
    if (entry.mine.empty()) continue;
    MatrixPlan packed = entry.matrices;
    packed.batch = static_cast<int64_t>(entry.mine.size());
    if (!memory_->is_device()) {
      orthogonalizer_->prepare(packed, std::nullopt);
      continue;
    }
    for (const MatrixBlock& block : packed.blocks) (void)orthogonalizer_->compiled(1, block.rows, packed.cols);
  }
}

DistributedOptimizer::~DistributedOptimizer() = default;

std::optional<std::vector<float>> DistributedOptimizer::momentum(const std::string& name) const {
  for (const Entry& entry : entries_)
    if (entry.parameter.name == name) {
      if (!entry.momentum) return std::nullopt;
      const bool balanced = distributed_.mode == OrthogonalizationMode::Balanced;
      std::vector<float> values(static_cast<size_t>(balanced ? entry.hi - entry.lo : entry.parameter.elements()));
      memory_->download(values.data(), entry.momentum, static_cast<int64_t>(values.size()) * 4);
      return values;
    }
  return std::nullopt;
}

void DistributedOptimizer::accumulate_gradients(void* stream) {
  if (!have_accumulated_) memory_->zero(flat_, plan_.padded_elements * 4, stream);
  for (const Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    if (!p.grad) {
      // missing_grad = zero (DeepSpeed, Keller): nothing to add, the step takes zeros. Skipping
      // would need every rank to agree on it, so under skip every rank must give every gradient.
      if (settings_.missing_gradient == MissingGradient::Zero) continue;
      throw std::invalid_argument("parameter '" + p.name + "' has no gradient: every rank must provide every gradient (zeros if unused), "
                                  "or set missing_grad = zero");
    }
    memory_->accumulate(p.grad_dtype, reinterpret_cast<std::uintptr_t>(p.grad), at(flat_, plan_.tensors[entry.tensor].offset), p.elements(), stream);
  }
  have_accumulated_ = true;
}

// The reduced gradient of this rank's partition, in place in flat_ (stage 1: every element).
void DistributedOptimizer::reduce_gradients(void* stream) {
  // The communicator follows this step's stream first, also when nothing is reduced here: the
  // exchanges after the Muon step (stage >= 2, deepspeed mode) run on it too.
  communicator_.set_stream(stream);
  if (!have_accumulated_) accumulate_gradients(stream);
  have_accumulated_ = false;
  if (distributed_.gradients_reduced) return;  // every rank holds the reduced gradients already
  const int64_t part = plan_.partition_elements;
  const float world = static_cast<float>(communicator_.world());
  if (distributed_.stage == 1) {
    communicator_.all_reduce_sum(reinterpret_cast<float*>(flat_), plan_.padded_elements);
    if (distributed_.average_gradients) memory_->divide(flat_, world, plan_.padded_elements, stream);
  } else {
    communicator_.reduce_scatter_sum(reinterpret_cast<const float*>(flat_), reinterpret_cast<float*>(slice_), part);
    if (distributed_.average_gradients) memory_->divide(slice_, world, part, stream);
    // Keep the flat indexing: this rank's partition at its place, the rest unused.
    memory_->copy(at(flat_, communicator_.rank() * part), slice_, part * 4, stream);
  }
}

std::string DistributedOptimizer::locate_nonfinite() const {
  // Only after the check said so: this rank's partition comes to the host to name the first bad
  // element.
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  std::vector<float> values(static_cast<size_t>(mine.end - mine.begin));
  memory_->download(values.data(), at(flat_, mine.begin), static_cast<int64_t>(values.size()) * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) continue;
    const int64_t index = mine.begin + static_cast<int64_t>(i);
    for (const Entry& entry : entries_) {
      const PlannedTensor& tensor = plan_.tensors[entry.tensor];
      if (index >= tensor.offset && index < tensor.offset + tensor.tensor.elements)
        return " (on rank " + std::to_string(communicator_.rank()) + ": parameter '" + entry.parameter.name + "')";
    }
    return "";
  }
  return "";
}

StepReport DistributedOptimizer::step(void* stream) {
  const int64_t bytes_before = communicator_.bytes_sent();
  StepReport report;
  reduce_gradients(stream);
  // A non-finite reduced gradient anywhere skips the step on every rank.
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  const bool bad_here = memory_->any_nonfinite({{DType::F32, at(flat_, mine.begin), mine.end - mine.begin}}, stream);
  std::string where;
  float bad = 0;
  if (bad_here) {
    where = locate_nonfinite();
    bad = 1;
  }
  communicator_.all_reduce_sum(&bad, 1);  // a host scalar: staged and waited for by a device engine
  if (bad > 0) {
    report.skipped = true;
    report.reason = "non-finite reduced gradient element(s) on " + std::to_string(static_cast<int64_t>(bad)) + " rank(s)" + where +
                    "; the step was skipped on every rank and no parameter or state changed";
    bytes_last_step_ = communicator_.bytes_sent() - bytes_before;
    return report;
  }
  if (distributed_.max_gradient_norm > 0) clip_gradients(report, stream);
  if (distributed_.mode == OrthogonalizationMode::DeepSpeed) muon_deepspeed(report, stream);
  else muon_balanced(report, stream);
  adam(stream);
  if (distributed_.stage <= 2) all_gather_parameters(stream);
  for (const Entry& entry : entries_) (entry.muon ? report.muon_updated : report.adam_updated) += entry.hi > entry.lo ? 1 : 0;
  bytes_last_step_ = communicator_.bytes_sent() - bytes_before;
  ++steps_;
  return report;
}

// Each element counted once: every rank sums the squares of its own partition (which holds the
// reduced gradient at every stage), and every rank adds the ranks' f64 sums in rank order, so all
// ranks get the same norm and the same divisor. Where every rank holds the whole reduced gradient
// (stage 1, gradients_reduced) the whole of it is divided; else this rank's partition (the pieces
// other owners send in deepspeed mode are divided by them).
void DistributedOptimizer::clip_gradients(StepReport& report, void* stream) {
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  double total = 0.0;
  for (double sum : all_gather_doubles({memory_->sum_squares(at(flat_, mine.begin), mine.end - mine.begin, stream)})) total += sum;
  report.gradient_norm = std::sqrt(total);
  const double coefficient = (report.gradient_norm + 1e-6) / distributed_.max_gradient_norm;
  if (!(coefficient > 1.0)) return;
  const float divisor = static_cast<float>(coefficient);
  if (distributed_.stage == 1 || distributed_.gradients_reduced) memory_->divide(flat_, divisor, plan_.padded_elements, stream);
  else memory_->divide(at(flat_, mine.begin), divisor, mine.end - mine.begin, stream);
}

void DistributedOptimizer::muon_deepspeed(StepReport& report, void* stream) {
  const int rank = communicator_.rank();
  // Each owner of a matrix assembles its whole reduced gradient in flat_ (at stage 1 it is all
  // there; at stages 2-3 the other owners' pieces arrive at their places), then runs the whole
  // Muon step on it: the compiled Muon steps of every matrix it owns, batched by shape.
  std::vector<Communicator::Transfer> sends, receives;
  for (Entry& entry : entries_) {
    if (!entry.muon || entry.hi <= entry.lo) continue;
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    if (distributed_.stage >= 2)
      for (int owner : tensor.owners) {
        if (owner == rank) continue;
        const RankSummary& theirs = plan_.ranks[static_cast<size_t>(owner)];
        const int64_t lo = std::clamp<int64_t>(theirs.begin - tensor.offset, 0, tensor.tensor.elements);
        const int64_t hi = std::clamp<int64_t>(theirs.end - tensor.offset, 0, tensor.tensor.elements);
        sends.push_back({owner, reinterpret_cast<void*>(at(flat_, tensor.offset + entry.lo)), (entry.hi - entry.lo) * 4});
        receives.push_back({owner, reinterpret_cast<void*>(at(flat_, tensor.offset + lo)), (hi - lo) * 4});
      }
  }
  if (distributed_.stage >= 2 && communicator_.world() > 1) communicator_.exchange(sends, receives);
  const std::vector<MuonStepTensor> owned = owned_muon_steps();
  if (owned.empty()) return;
  // The step writes the whole parameter; the elements outside this rank's slice get what their
  // owners compute from the same inputs, and the all-gather (or gather_parameters) overwrites them.
  const std::vector<MuonStepGroup> launches = muon_step_groups(*orthogonalizer_, settings_.muon, owned);
  const auto started = std::chrono::steady_clock::now();
  launcher_.run(launches, stream, memory_->is_device());
  if (!memory_->is_device()) report.orthogonalize_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

// O = NS(U) for `plan`'s matrices: host memory through the block orthogonalizer; device memory
// one launch sequence per (matrix, block), each a contiguous run of rows.
void DistributedOptimizer::orthogonalize(const MatrixPlan& plan, std::uintptr_t update, std::uintptr_t orthogonal, StepReport& report, void* stream) {
  if (!memory_->is_device()) {
    const double before = orthogonalizer_->seconds();
    orthogonalizer_->orthogonalize(plan, reinterpret_cast<const float*>(update), reinterpret_cast<float*>(orthogonal));
    report.orthogonalize_seconds += orthogonalizer_->seconds() - before;
    return;
  }
  for (int64_t matrix = 0; matrix < plan.batch; ++matrix)
    for (const MatrixBlock& block : plan.blocks) {
      const int64_t first = matrix * plan.rows * plan.cols + block.row_offset * plan.cols;
      orthogonalizer_->compiled(1, block.rows, plan.cols)->run_device(at(update, first), at(orthogonal, first), stream);
    }
}

void DistributedOptimizer::muon_balanced(StepReport& report, void* stream) {
  const int rank = communicator_.rank();
  // Each matrix of a batch has its own orthogonalizer (partition_plan.h): the pieces of U and O
  // travel per matrix, the element ranges where a rank's slice meets a matrix.
  auto slice_of = [&](int owner, int64_t offset, int64_t elements) {  // a rank's slice of a tensor
    const RankSummary& theirs = plan_.ranks[static_cast<size_t>(owner)];
    return std::pair<int64_t, int64_t>{std::clamp<int64_t>(theirs.begin - offset, 0, elements), std::clamp<int64_t>(theirs.end - offset, 0, elements)};
  };
  auto bytes = [](int64_t elements) { return elements * 4; };
  // 1. Momentum and U on the slices; U's pieces to each matrix's orthogonalizer, which packs
  //    its matrices' U one after another.
  std::vector<Communicator::Transfer> sends, receives;
  for (Entry& entry : entries_) {
    if (!entry.muon) continue;
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    const int64_t matrix = entry.matrices.rows * entry.matrices.cols;
    if (entry.hi > entry.lo) {
      memory_->muon_momentum(settings_.muon, at(flat_, tensor.offset + entry.lo), entry.momentum, entry.update, entry.hi - entry.lo, stream);
      for (int64_t b = entry.lo / matrix; b * matrix < entry.hi; ++b) {
        const int target = tensor.matrix_orthogonalizers[static_cast<size_t>(b)];
        const int64_t lo = std::max(entry.lo, b * matrix), hi = std::min(entry.hi, (b + 1) * matrix);
        if (target != rank) sends.push_back({target, reinterpret_cast<void*>(at(entry.update, lo - entry.lo)), bytes(hi - lo)});
      }
    }
    for (size_t slot = 0; slot < entry.mine.size(); ++slot) {
      const int64_t b = entry.mine[slot], begin = b * matrix;
      const std::uintptr_t packed = at(entry.assembled, static_cast<int64_t>(slot) * matrix);
      for (int owner : tensor.owners) {
        const auto [their_lo, their_hi] = slice_of(owner, tensor.offset, tensor.tensor.elements);
        const int64_t lo = std::max(their_lo, begin), hi = std::min(their_hi, begin + matrix);
        if (lo >= hi) continue;
        if (owner == rank) memory_->copy(at(packed, lo - begin), at(entry.update, lo - entry.lo), bytes(hi - lo), stream);
        else receives.push_back({owner, reinterpret_cast<void*>(at(packed, lo - begin)), bytes(hi - lo)});
      }
    }
  }
  communicator_.set_stream(stream);
  if (communicator_.world() > 1) communicator_.exchange(sends, receives);
  // 2. NS of this rank's matrices, batched; O's pieces back to their owners (and into this rank's
  //    own slice of O).
  sends.clear();
  receives.clear();
  for (Entry& entry : entries_) {
    if (!entry.muon) continue;
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    const int64_t matrix = entry.matrices.rows * entry.matrices.cols;
    if (!entry.mine.empty()) {
      MatrixPlan packed = entry.matrices;
      packed.batch = static_cast<int64_t>(entry.mine.size());
      orthogonalize(packed, entry.assembled, entry.result, report, stream);
    }
    for (size_t slot = 0; slot < entry.mine.size(); ++slot) {
      const int64_t b = entry.mine[slot], begin = b * matrix;
      const std::uintptr_t packed = at(entry.result, static_cast<int64_t>(slot) * matrix);
      for (int owner : tensor.owners) {
        const auto [their_lo, their_hi] = slice_of(owner, tensor.offset, tensor.tensor.elements);
        const int64_t lo = std::max(their_lo, begin), hi = std::min(their_hi, begin + matrix);
        if (lo >= hi) continue;
        if (owner == rank) memory_->copy(at(entry.slice_result, lo - entry.lo), at(packed, lo - begin), bytes(hi - lo), stream);
        else sends.push_back({owner, reinterpret_cast<void*>(at(packed, lo - begin)), bytes(hi - lo)});
      }
    }
    if (entry.hi > entry.lo)
      for (int64_t b = entry.lo / matrix; b * matrix < entry.hi; ++b) {
        const int target = tensor.matrix_orthogonalizers[static_cast<size_t>(b)];
        const int64_t lo = std::max(entry.lo, b * matrix), hi = std::min(entry.hi, (b + 1) * matrix);
        if (target != rank) receives.push_back({target, reinterpret_cast<void*>(at(entry.slice_result, lo - entry.lo)), bytes(hi - lo)});
      }
  }
  if (communicator_.world() > 1) communicator_.exchange(sends, receives);
  // 3. The update of the slice; apply_muon indexes O like the parameter, from the slice's start.
  for (Entry& entry : entries_)
    if (entry.muon && entry.hi > entry.lo)
      memory_->apply_muon(settings_.muon, entry.matrices, entry.parameter.dtype, reinterpret_cast<std::uintptr_t>(entry.parameter.data),
                          entry.slice_result - static_cast<std::uintptr_t>(entry.lo * 4), entry.lo, entry.hi, stream);
}

void DistributedOptimizer::adam(void* stream) {
  for (Entry& entry : entries_) {
    if (entry.muon || entry.hi <= entry.lo) continue;
    const PlannedTensor& tensor = plan_.tensors[entry.tensor];
    entry.step += 1;
    const std::uintptr_t param = reinterpret_cast<std::uintptr_t>(entry.parameter.data) + static_cast<std::uintptr_t>(entry.lo * dtype_bytes(entry.parameter.dtype));
    memory_->adam_step(settings_.adam, entry.step, DType::F32, at(flat_, tensor.offset + entry.lo), entry.exp_avg, entry.exp_avg_sq, entry.parameter.dtype,
                       param, entry.hi - entry.lo, stream);
  }
}

void DistributedOptimizer::all_gather_parameters(void* stream) {
  const int64_t part = plan_.partition_elements;
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  memory_->zero(slice_, part * 4, stream);
  auto address = [](const Entry& entry, int64_t element) {
    return reinterpret_cast<std::uintptr_t>(entry.parameter.data) + static_cast<std::uintptr_t>(element * dtype_bytes(entry.parameter.dtype));
  };
  for (const Entry& entry : entries_) {
    if (entry.hi <= entry.lo) continue;
    const int64_t offset = plan_.tensors[entry.tensor].offset;
    memory_->convert(entry.parameter.dtype, address(entry, entry.lo), DType::F32, at(slice_, offset + entry.lo - mine.begin), entry.hi - entry.lo, stream);
  }
  // The gathered parameters land in flat_ when no micro-batch is accumulating there (after a
  // step; the next accumulation zeroes it), else (stage 3 between micro-batches) in a buffer of
  // their own, allocated the first time.
  std::uintptr_t gathered = flat_;
  if (have_accumulated_) {
    if (!gather_) gather_ = buffers_.take(plan_.padded_elements);
    gathered = gather_;
  }
  communicator_.set_stream(stream);
  communicator_.all_gather(reinterpret_cast<const void*>(slice_), part * 4, reinterpret_cast<void*>(gathered));
  // Every value came from a parameter of the same type, so the stores are exact.
  for (const Entry& entry : entries_) {
    const int64_t offset = plan_.tensors[entry.tensor].offset;
    const int64_t elements = entry.parameter.elements();
    const int64_t lo = entry.hi > entry.lo ? entry.lo : elements, hi = entry.hi > entry.lo ? entry.hi : elements;
    if (lo > 0) memory_->convert(DType::F32, at(gathered, offset), entry.parameter.dtype, address(entry, 0), lo, stream);
    if (hi < elements) memory_->convert(DType::F32, at(gathered, offset + hi), entry.parameter.dtype, address(entry, hi), elements - hi, stream);
  }
}

void DistributedOptimizer::gather_parameters(void* stream) { all_gather_parameters(stream); }

void DistributedOptimizer::set_gradient(const std::string& name, const void* grad, DType grad_dtype) {
  for (Entry& entry : entries_)
    if (entry.parameter.name == name) {
      if (grad)
        if (const std::string problem = memory_->address_problem(reinterpret_cast<std::uintptr_t>(grad)); !problem.empty())
          throw std::invalid_argument("parameter '" + name + "': the gradient pointer " + problem);
      entry.parameter.grad = grad;
      entry.parameter.grad_dtype = grad_dtype;
      return;
    }
  throw std::invalid_argument("no optimized parameter named '" + name + "'");
}

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

// The partitioned state, laid like the parameters' flat buffer: each rank puts its slice of every
// tensor's state at the tensor's place in its partition (Muon's momentum and AdamW's exp_avg in
// one buffer, exp_avg_sq in the other: a tensor has one or the other), and one all-gather per
// buffer gives every rank the whole of it. deepspeed mode: the owners of a matrix hold identical
// whole momenta; each contributes its slice.
std::map<std::string, HybridOptimizer::State> DistributedOptimizer::gather_state() {
  communicator_.set_stream(nullptr);
  const int64_t part = plan_.partition_elements, padded = plan_.padded_elements;
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  const bool balanced = distributed_.mode == OrthogonalizationMode::Balanced;
  ScratchBuffer first_slice(*memory_, part), second_slice(*memory_, part);
  for (const Entry& entry : entries_) {
    if (entry.hi <= entry.lo) continue;
    const int64_t place = plan_.tensors[entry.tensor].offset + entry.lo - mine.begin, count = entry.hi - entry.lo;
    if (entry.muon) {
      memory_->copy(at(first_slice.address, place), at(entry.momentum, balanced ? 0 : entry.lo), count * 4, nullptr);
    } else {
      memory_->copy(at(first_slice.address, place), entry.exp_avg, count * 4, nullptr);
      memory_->copy(at(second_slice.address, place), entry.exp_avg_sq, count * 4, nullptr);
    }
  }
  std::vector<float> first(static_cast<size_t>(padded)), second(static_cast<size_t>(padded));
  {
    ScratchBuffer gathered(*memory_, padded);
    communicator_.all_gather(reinterpret_cast<const void*>(first_slice.address), part * 4, reinterpret_cast<void*>(gathered.address));
    memory_->download(first.data(), gathered.address, padded * 4);
    communicator_.all_gather(reinterpret_cast<const void*>(second_slice.address), part * 4, reinterpret_cast<void*>(gathered.address));
    memory_->download(second.data(), gathered.address, padded * 4);
  }
  // AdamW's step counts: the first owner of each tensor gives its count, in two f32 halves (exact
  // for counts below 2^42), through a host all-reduce (staged by device engines). steps_ is the
  // same on every rank.
  std::vector<float> counts(entries_.size() * 2, 0.0f);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    if (entry.muon || plan_.tensors[entry.tensor].owners.empty() || plan_.tensors[entry.tensor].owners.front() != communicator_.rank()) continue;
    counts[2 * i] = static_cast<float>(entry.step >> 18);
    counts[2 * i + 1] = static_cast<float>(entry.step & ((int64_t{1} << 18) - 1));
  }
  if (communicator_.world() > 1) communicator_.all_reduce_sum(counts.data(), static_cast<int64_t>(counts.size()));
  std::map<std::string, HybridOptimizer::State> state;
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
      values.step = (static_cast<int64_t>(counts[2 * i]) << 18) + static_cast<int64_t>(counts[2 * i + 1]);
    }
  }
  return state;
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
  for (Entry& entry : entries_) {
    if (entry.hi <= entry.lo) continue;
    const HybridOptimizer::State& values = state.at(entry.parameter.name);
    const int64_t count = entry.hi - entry.lo;
    if (entry.muon) {
      if (balanced) memory_->upload(entry.momentum, values.momentum.data() + entry.lo, count * 4);
      else memory_->upload(entry.momentum, values.momentum.data(), entry.parameter.elements() * 4);
    } else {
      memory_->upload(entry.exp_avg, values.exp_avg.data() + entry.lo, count * 4);
      memory_->upload(entry.exp_avg_sq, values.exp_avg_sq.data() + entry.lo, count * 4);
      entry.step = values.step;
    }
  }
  steps_ = steps_taken;
}

void DistributedOptimizer::save_state(const std::string& path) {
  const std::map<std::string, HybridOptimizer::State> state = gather_state();
  std::exception_ptr failure;
  if (communicator_.rank() == 0) {
    try {
      write_state_file(path, state_owners(), state, settings_, steps_);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree(failure, "writing the optimizer state file on rank 0");
}

void DistributedOptimizer::load_state(const std::string& path) {
  std::map<std::string, HybridOptimizer::State> state;
  int64_t steps = 0;
  std::exception_ptr failure;
  try {
    state = read_state_file(path, state_owners(), settings_, steps);
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, "reading the optimizer state file '" + path + "'");
  load_state(state, steps);
}

}  // namespace orthojit::runtime
