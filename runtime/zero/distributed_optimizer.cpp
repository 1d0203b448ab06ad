// Distributed Muon + AdamW (see distributed_optimizer.h).
#include "runtime/zero/distributed_optimizer.h"
#include "runtime/zero/distributed_optimizer_entry.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "runtime/muon/deepspeed_config.h"
#include "runtime/muon/update_rules.h"

namespace orthojit::runtime {

std::uintptr_t DistributedOptimizer::Buffers::take(int64_t floats) {
  addresses.reserve(addresses.size() + 1);  // so the push below cannot throw after allocating
  const std::uintptr_t address = memory->allocate(std::max<int64_t>(floats, 1) * 4);
  addresses.push_back(address);
  bytes += std::max<int64_t>(floats, 1) * 4;
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
  // DeepSpeed's default bucket (5e8 elements) would stage the whole model for any model below
  // 5e8 elements per rank: the bucket is the config's only when it sets reduce_bucket_size.
  if (config.zero.reduce_bucket_size_given) settings.bucket_elements = config.zero.reduce_bucket_size;
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

std::uintptr_t DistributedOptimizer::take_agreed(int64_t floats, const std::string& doing) {
  std::exception_ptr failure;
  std::uintptr_t address = 0;
  try {
    address = buffers_.take(floats);
  } catch (...) {
    failure = std::current_exception();
  }
  agree(failure, doing);
  return address;
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
  if (distributed_.bucket_elements < 1)
    throw std::invalid_argument("bucket_elements (the staging buffer of the bucketed collectives, in f32 elements) must be >= 1, got " +
                                std::to_string(distributed_.bucket_elements));
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
  // The flat buffer holds only this rank's gradient range (everything at stage 1); flat_ is set
  // so that at(flat_, i) addresses flat element i (unsigned arithmetic: the offset may wrap and
  // wraps back).
  const int64_t window = mine.gradient_end - mine.gradient_begin;
  flat_ = buffers_.take(window) - static_cast<std::uintptr_t>(mine.gradient_begin * 4);
  // Stage 1 holds the whole flat buffer, which receives the parameters' all-gather in one round
  // from a slice of their own; stages 2-3 reduce and gather through the bucket.
  staging_chunk_ = std::clamp<int64_t>(distributed_.bucket_elements / communicator_.world(), 1, plan_.partition_elements);
  if (distributed_.stage == 1) {
    slice_ = buffers_.take(plan_.partition_elements);
  } else {
    staging_ = buffers_.take(staging_chunk_ * communicator_.world());
  }
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
      orthogonalizer_->prepare(packed);
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
  // Checked before any collective, and agreed by the ranks (one scalar all-reduce per micro-batch,
  // under missing_grad = skip only: under zero no gradient is missing), so that a rank without a
  // gradient does not leave the others in the reduction (a step's, or at stages 2-3 this
  // micro-batch's reduce-scatter).
  const bool collective = distributed_.stage >= 2 && !distributed_.gradients_reduced;
  if (settings_.missing_gradient != MissingGradient::Zero) {
    std::exception_ptr missing;
    for (const Entry& entry : entries_)
      if (!entry.parameter.grad) {
        missing = std::make_exception_ptr(std::invalid_argument("parameter '" + entry.parameter.name +
                                                                "' has no gradient: every rank must provide every gradient (zeros if unused), "
                                                                "or set missing_grad = zero"));
        break;
      }
    agree(missing, "accumulating gradients (a parameter without a gradient)");
  }
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  if (collective) {
    const int64_t before = communicator_.bytes_sent();
    reduce_scatter_gradients(stream);
    accumulated_bytes_ += communicator_.bytes_sent() - before;
  } else {
    const int64_t window = mine.gradient_end - mine.gradient_begin;
    if (!have_accumulated_) memory_->zero(at(flat_, mine.gradient_begin), window * 4, stream);
    add_gradients(mine.gradient_begin, window, at(flat_, mine.gradient_begin), stream);
  }
  have_accumulated_ = true;
}

void DistributedOptimizer::add_gradients(int64_t begin, int64_t count, std::uintptr_t destination, void* stream) const {
  const int64_t end = begin + count;
  for (const Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    const int64_t offset = plan_.tensors[entry.tensor].offset;
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + p.elements());
    // missing_grad = zero (DeepSpeed, Keller): nothing to add, the step takes zeros.
    if (lo >= hi || !p.grad) continue;
    const std::uintptr_t grad = reinterpret_cast<std::uintptr_t>(p.grad) + static_cast<std::uintptr_t>((lo - offset) * dtype_bytes(p.grad_dtype));
    memory_->accumulate(p.grad_dtype, grad, at(destination, lo - begin), hi - lo, stream);
  }
}

void DistributedOptimizer::store_parameters(int64_t begin, int64_t count, std::uintptr_t source, void* stream) const {
  const int64_t end = begin + count;
  for (const Entry& entry : entries_) {
    const Parameter& p = entry.parameter;
    const int64_t offset = plan_.tensors[entry.tensor].offset;
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + p.elements());
    if (lo >= hi) continue;
    const std::uintptr_t data = reinterpret_cast<std::uintptr_t>(p.data) + static_cast<std::uintptr_t>((lo - offset) * dtype_bytes(p.dtype));
    memory_->convert(DType::F32, at(source, lo - begin), p.dtype, data, hi - lo, stream);
  }
}

// Round j reduces elements [j·c, j·c + n) of every rank's partition: the staging buffer holds
// rank r's piece at r·n (this rank's gradients there, zeros in the padding), and the
// reduce-scatter leaves the sums of this rank's piece at its place in the flat buffer (the first
// micro-batch) or adds them there (later ones: the reduced micro-batches summed in order).
void DistributedOptimizer::reduce_scatter_gradients(void* stream) {
  communicator_.set_stream(stream);
  const int world = communicator_.world();
  const int64_t part = plan_.partition_elements;
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
  // The round a later micro-batch is reduced into before it is added: only trainers that
  // accumulate need it (accumulating is collective, so every rank gets here at the same call).
  if (have_accumulated_ && !received_) received_ = take_agreed(staging_chunk_, "allocating the buffer of accumulated micro-batches");
  for (int64_t first = 0; first < part; first += staging_chunk_) {
    const int64_t count = std::min(staging_chunk_, part - first);
    memory_->zero(staging_, world * count * 4, stream);
    for (int r = 0; r < world; ++r) add_gradients(plan_.ranks[static_cast<size_t>(r)].begin + first, count, at(staging_, r * count), stream);
    const std::uintptr_t target = at(flat_, mine.begin + first);
    communicator_.reduce_scatter_sum(reinterpret_cast<const float*>(staging_), reinterpret_cast<float*>(have_accumulated_ ? received_ : target), count);
    if (have_accumulated_) memory_->accumulate(DType::F32, received_, target, count, stream);
  }
}

// The reduced gradient of this rank's partition, in place in flat_ (stage 1: every element).
void DistributedOptimizer::reduce_gradients(void* stream) {
  // The communicator follows this step's stream first, also when nothing is reduced here: the
  // exchanges after the Muon step (stage >= 2, deepspeed mode) run on it too.
  communicator_.set_stream(stream);
  if (!have_accumulated_) accumulate_gradients(stream);
  have_accumulated_ = false;
  if (distributed_.gradients_reduced) return;  // every rank holds the reduced gradients already
  const float world = static_cast<float>(communicator_.world());
  if (distributed_.stage == 1) {
    communicator_.all_reduce_sum(reinterpret_cast<float*>(flat_), plan_.padded_elements);
    if (distributed_.average_gradients) memory_->divide(flat_, world, plan_.padded_elements, stream);
  } else if (distributed_.average_gradients) {
    // Reduced while accumulating (reduce_scatter_gradients).
    const RankSummary& mine = plan_.ranks[static_cast<size_t>(communicator_.rank())];
    memory_->divide(at(flat_, mine.begin), world, plan_.partition_elements, stream);
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
  // The reductions of the micro-batches accumulated before this call belong to this step.
  const int64_t bytes_before = communicator_.bytes_sent() - accumulated_bytes_;
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
    accumulated_bytes_ = 0;
    return report;
  }
  if (distributed_.max_gradient_norm > 0) clip_gradients(report, stream);
  if (distributed_.mode == OrthogonalizationMode::DeepSpeed) muon_deepspeed(report, stream);
  else muon_balanced(report, stream);
  adam(stream);
  if (distributed_.stage <= 2) all_gather_parameters(stream);
  for (const Entry& entry : entries_) (entry.muon ? report.muon_updated : report.adam_updated) += entry.hi > entry.lo ? 1 : 0;
  bytes_last_step_ = communicator_.bytes_sent() - bytes_before;
  accumulated_bytes_ = 0;
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
  if (distributed_.stage == 1 || distributed_.gradients_reduced)
    memory_->divide(at(flat_, mine.gradient_begin), divisor, mine.gradient_end - mine.gradient_begin, stream);
  else
    memory_->divide(at(flat_, mine.begin), divisor, mine.end - mine.begin, stream);
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

// Each rank's updated slice as f32 (exact for every parameter type), all-gathered, and the other
// ranks' pieces stored into the parameters (this rank's own slice is already there). Stages 2-3:
// the slice at its partition's place in the flat buffer (the reduced gradient there is used up;
// stage 3 between micro-batches, where the flat buffer accumulates, in a buffer of its own),
// gathered bucket by bucket: round j gathers elements [j·c, j·c + n) of every partition into the
// staging buffer. Stage 1: from slice_ into the whole flat buffer, in one round.
void DistributedOptimizer::all_gather_parameters(void* stream) {
  const int64_t part = plan_.partition_elements;
  const int world = communicator_.world(), rank = communicator_.rank();
  const RankSummary& mine = plan_.ranks[static_cast<size_t>(rank)];
  const bool whole = distributed_.stage == 1;
  std::uintptr_t send = at(flat_, mine.begin);
  if (whole || have_accumulated_) {
    // Stage 3, a gather between micro-batches (stage 1 allocated it at construction).
    if (!slice_) slice_ = take_agreed(part, "allocating the buffer of a parameter gather between micro-batches");
    send = slice_;
  }
  const std::uintptr_t receive = whole ? flat_ : staging_;
  const int64_t chunk = whole ? part : staging_chunk_;
  memory_->zero(send, part * 4, stream);
  for (const Entry& entry : entries_) {
    if (entry.hi <= entry.lo) continue;
    const int64_t offset = plan_.tensors[entry.tensor].offset;
    const std::uintptr_t data = reinterpret_cast<std::uintptr_t>(entry.parameter.data) + static_cast<std::uintptr_t>(entry.lo * dtype_bytes(entry.parameter.dtype));
    memory_->convert(entry.parameter.dtype, data, DType::F32, at(send, offset + entry.lo - mine.begin), entry.hi - entry.lo, stream);
  }
  communicator_.set_stream(stream);
  for (int64_t first = 0; first < part; first += chunk) {
    const int64_t count = std::min(chunk, part - first);
    communicator_.all_gather(reinterpret_cast<const void*>(at(send, first)), count * 4, reinterpret_cast<void*>(receive));
    for (int r = 0; r < world; ++r)
      if (r != rank) store_parameters(plan_.ranks[static_cast<size_t>(r)].begin + first, count, at(receive, r * count), stream);
  }
}

void DistributedOptimizer::gather_parameters(void* stream) {
  // Stages 1-2 leave every rank's parameters whole after each step (and the flat buffer is where
  // stage 1 accumulates, so a gather between micro-batches must not touch it).
  if (distributed_.stage >= 3) all_gather_parameters(stream);
}

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

void DistributedOptimizer::set_data(const std::string& name, void* data) {
  for (Entry& entry : entries_)
    if (entry.parameter.name == name) {
      if (!data) throw std::invalid_argument("parameter '" + name + "': the data pointer is null");
      if (const std::string problem = memory_->address_problem(reinterpret_cast<std::uintptr_t>(data)); !problem.empty())
        throw std::invalid_argument("parameter '" + name + "': the data pointer " + problem);
      entry.parameter.data = data;  // every step plans its launches from the current addresses
      return;
    }
  throw std::invalid_argument("no optimized parameter named '" + name + "'");
}

}  // namespace orthojit::runtime
