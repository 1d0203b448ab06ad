// Distributed Muon + AdamW with ZeRO partitioning (docs/distributed.md), over any Communicator.
//
// One step on rank r:
//   1. gradients: reduced, summed, then divided by the world size unless `average_gradients` is
//      off. Stage 1: the local ones (or the micro-batches accumulated since the last step) are
//      all-reduced. Stages 2 and 3 (ZeRO-2's gradient partitioning): each micro-batch is
//      reduce-scattered when it is accumulated, in buckets, into this rank's partition, where
//      the reduced micro-batches are summed; no rank holds the whole model's gradient. A NaN or
//      infinity on any rank skips the step everywhere;
//   2. Muon, per the plan's mode (partition_plan.h):
//        deepspeed  each owner of a matrix assembles its whole reduced gradient (the pieces other
//                   owners hold come by point-to-point), keeps a full momentum copy, computes NS
//                   of the whole matrix and applies its own slice;
//        balanced   owners keep the momentum of their slice and send U's pieces to the matrix's
//                   orthogonalizer, which computes NS once and sends O's pieces back;
//      With max_gradient_norm, the reduced gradient's global norm (every rank's partition, each
//      element once) is clipped to it: g ← g / c, c = fl32((‖g‖ + 1e-6) / max) when c > 1;
//   3. AdamW on the rank's slice (plain ZeRO);
//   4. parameters: all-gathered at stages 1 and 2; at stage 3 they stay partitioned until
//      gather_parameters().
// The element rules and the block orthogonalizer are those of the single-rank optimizer
// (update_rules.h), so given the same reduced gradients a rank's slice is bit-identical to the
// single-rank update.
//
// Where it runs: parameters, gradients, the optimizer state and the step's buffers all live in
// one MemorySpace (runtime/muon/memory_space.h). Host memory (the default) over MPI or NCCL (host
// buffers staged through the device); CUDA memory (PyTorch's CUDA tensors) over NCCL only, with
// every element-wise part a generated kernel and every collective on device buffers, enqueued
// on the caller's stream. The arithmetic is the same in both: the element rules have the host
// loops' bits (elementwise_codegen.h), and the Muon step of the matrices a rank orthogonalizes
// in deepspeed mode is the compiled Muon step the single-rank optimizers run
// (muon_step_launcher.h), so on either memory the contract above holds against the single-rank
// optimizer of that memory (HybridOptimizer; DeviceOptimizer on CUDA memory). A step on CUDA
// memory waits once, for the non-finite check's flag (as DeviceOptimizer's).
//
// With `offload_optimizer` the state lives in host memory and the orthogonalization runs on the
// host too (muon.backend cpu or ref): DeepSpeed's offload has no working Muon path.
//
// Collective failures: whatever can fail on one rank only (a pointer the driver does not know, a
// kernel that does not compile, a state file a rank cannot read, a checkpoint that does not fit)
// is decided before the next collective and shared through it, so that every rank throws (the
// failing one its own message, the others the count of failing ranks) instead of one rank
// throwing while the others wait forever in the next collective. Every kernel a step runs is
// compiled at construction, under that rule, so a step never compiles.
#pragma once

#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/memory_space.h"
#include "runtime/muon/muon_step_launcher.h"
#include "runtime/zero/communicator.h"
#include "runtime/zero/partition_plan.h"

namespace orthojit::runtime {

struct DeepSpeedConfig;

struct DistributedSettings {
  int stage = 1;
  OrthogonalizationMode mode = OrthogonalizationMode::DeepSpeed;
  int64_t alignment = 1;
  bool average_gradients = true;   // DeepSpeed averages over the data-parallel ranks
  // The gradients are already reduced and the same on every rank (DistributedDataParallel
  // averaged them in backward): taken as they are, neither reduced nor averaged again.
  bool gradients_reduced = false;
  bool offload_optimizer = false;  // state in host memory, NS on the CPU backend
  // > 0: the reduced gradient's global norm is clipped to this before momentum and AdamW see it
  // (DeepSpeed's gradient_clipping; torch.nn.utils.clip_grad_norm_'s rule). 0: off.
  double max_gradient_norm = 0;
  // The staging buffer of the bucketed collectives, in f32 elements over all ranks (DeepSpeed's
  // reduce_bucket_size): the gradients are reduce-scattered, and the parameters all-gathered, in
  // rounds of bucket_elements / world elements of each rank's partition, so that no rank holds a
  // flat buffer of the whole model at stages 2 and 3. Larger: fewer, larger messages.
  int64_t bucket_elements = int64_t{1} << 24;
};

// From DeepSpeed's zero_optimization section (already validated by the config reader): the
// stage, offload_optimizer {device: cpu}; NVMe offload is refused with a clear message.
DistributedSettings distributed_settings(const DeepSpeedConfig& config);

// The hyperparameters a trainer may change between steps (learning-rate, momentum and
// weight-decay schedules; torch's param_groups). Everything else is fixed at construction.
struct StepHyperparameters {
  double muon_lr = 0, muon_momentum = 0, muon_weight_decay = 0;
  double adam_lr = 0, adam_beta1 = 0, adam_beta2 = 0, adam_eps = 0, adam_weight_decay = 0;
};
StepHyperparameters step_hyperparameters(const OptimizerSettings& settings);

class DistributedOptimizer {
 public:
  // Every rank passes the same parameters (names, shapes, order) and settings; their data and
  // gradient pointers are addresses in `memory`. Throws std::invalid_argument naming the problem
  // (stage, offload with a GPU backend, CUDA memory over a host-only engine, ...).
  DistributedOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings, DistributedSettings distributed, Communicator& communicator,
                       std::shared_ptr<MemorySpace> memory = host_memory());
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // `stream`: a CUstream on CUDA memory (null: the legacy default stream), ignored on the host.
  // Adds the parameters' current gradients to the accumulation buffer (one micro-batch). At
  // stages 2 and 3 (gradients not yet reduced) this reduce-scatters them: collective, every rank
  // accumulates the same number of micro-batches. Under missing_grad = skip a parameter without a
  // gradient is an error on every rank (std::invalid_argument on the ranks that lack one,
  // std::runtime_error on the others), and nothing is accumulated.
  void accumulate_gradients(void* stream = nullptr);
  // One optimizer step (Muon applied once, however many micro-batches were accumulated).
  StepReport step(void* stream = nullptr);
  // Stage 3: every rank's parameter buffers receive the other ranks' slices (collective). Stages
  // 1-2: nothing to do (the parameters are whole after every step).
  void gather_parameters(void* stream = nullptr);
  // The trainer may re-point a gradient or a parameter's data between steps (frameworks
  // reallocate them); a pointer `memory` does not know is std::invalid_argument.
  void set_gradient(const std::string& name, const void* grad, DType grad_dtype);
  void set_data(const std::string& name, void* data);
  // Each optimized parameter (in the order given) as the single-rank optimizers report it, with
  // state_bytes what this rank holds for it (deepspeed: the whole momentum of a Muon matrix it
  // owns a piece of; otherwise its slice); and the totals per group.
  std::vector<ParameterInfo> parameters() const;
  StateBytes state_bytes() const;

  // The current step hyperparameters, and new ones for the next step: every rank must set the
  // same values (as every rank's scheduler does). Checked first (std::invalid_argument naming
  // the value and its range); nothing changes when one is refused.
  StepHyperparameters hyperparameters() const;
  void set_hyperparameters(const StepHyperparameters& values);

  // QK-clip (MuonClip, Kimi K2), after a step, collective: each rank gives the S_max its own
  // batch measured; every rank clips with the largest S_max of each head over the ranks (so the
  // ranks' parameters stay equal; HybridOptimizer::qk_clip of those maxima, bit for bit). Each
  // rank scales the rows of its whole parameters (at stage 3 the rows outside its slice are
  // overwritten by the next gather with their owners' scaled ones). Checked on every rank first
  // (the names, the shapes, τ, S_max values and lengths): every rank throws when any rank's
  // arguments are wrong, and nothing changes.
  void qk_clip(const std::string& q_name, const std::string& k_name, int64_t head_rows, const std::vector<double>& s_max, double tau);

  // Checkpoints. The state is world-size independent: every tensor's whole state, as the
  // single-rank optimizer holds it (HybridOptimizer::State: Muon's momentum, AdamW's moments
  // and step), so a checkpoint moves between world sizes, stages, modes and the single-rank
  // optimizers. All four are collective (every rank calls them, in the same order).
  //   gather_state: every rank receives the whole state (two all-gathers of the partitioned
  //     state through the step's memory space, plus one small all-reduce of the step counts);
  //     with a `root` rank, only that rank does (each other rank sends it its partition and
  //     gets an empty map), so the others never hold the whole state.
  //   load_state: each rank takes its part of `state`; every rank checks everything first and
  //     the ranks agree (one all-reduce): when any rank finds a problem, every rank throws
  //     std::runtime_error and no rank changes anything.
  //   save_state: HybridOptimizer::save_state's file, byte for byte, written by rank 0 alone as
  //     it streams in: tensor by tensor in the file's order, each piece's owner sends it (at most
  //     bucket_elements / world floats), and rank 0 writes it in place (SafetensorsWriter) front
  //     to back, hashing as it writes (nothing read back at commit), so a rank holds two
  //     chunks beyond its own state (rank 0: four). A failed write throws on every rank and leaves the
  //     target as it was. `extra_metadata` (rank 0's) joins the file's metadata (a wrapper's own
  //     record, such as orthojit.DistributedMuon's param_groups); a key of the state file's own
  //     is refused (rank 0 throws std::invalid_argument, the others std::runtime_error).
  //   load_state(path): every rank reads the header and only its own part of the file (a
  //     shared file system), rank 0 also checks the whole file's checksum, under load_state's
  //     rule; no rank holds more than its own part.
  //   `progress` (save: rank 0's writer; load: each rank's reads, and rank 0's checksum) reports
  //     the file's phases as they advance (runtime/muon/file_progress.h).
  // Collective: returns when `problem` is empty on every rank, else throws on every rank (this
  // rank's own problem as std::invalid_argument, the others saying how many ranks failed at
  // `doing`): a wrapper's checks before a collective call (orthojit.DistributedMuon.save_state).
  void require_on_every_rank(const std::string& problem, const std::string& doing);
  std::map<std::string, HybridOptimizer::State> gather_state(std::optional<int> root = std::nullopt);
  void load_state(const std::map<std::string, HybridOptimizer::State>& state, int64_t steps_taken);
  void save_state(const std::string& path, const std::map<std::string, std::string>& extra_metadata = {}, const FileProgressCallback& progress = {});
  // `refusal` (non-empty): this rank already knows it cannot load (a wrapper's own checks
  // failed); it reads nothing, takes part in the collectives, and throws std::invalid_argument
  // with `refusal` while every other rank throws too.
  void load_state(const std::string& path, const std::string& refusal = "", const FileProgressCallback& progress = {});
  // Steps taken (skipped steps not counted), saved with the state.
  int64_t steps_taken() const { return steps_; }

  const PartitionPlan& plan() const { return plan_; }
  const DistributedSettings& settings() const { return distributed_; }
  const OptimizerSettings& optimizer_settings() const { return settings_; }
  // A host copy of the momentum this rank holds for a Muon parameter (deepspeed: the whole
  // matrix on each owner; balanced: its slice), or nothing when it holds none.
  std::optional<std::vector<float>> momentum(const std::string& name) const;
  const MemorySpace& memory() const { return *memory_; }
  // Bytes this optimizer has allocated in its memory space (optimizer state and step buffers);
  // the trainer's parameters and gradients are not counted.
  int64_t memory_bytes() const { return buffers_.bytes; }
  // Bytes this rank sent for the last step, the reductions of the micro-batches it accumulated
  // (stages 2-3) included.
  int64_t bytes_sent_last_step() const { return bytes_last_step_; }

 private:
  struct Entry;
  // Throws std::invalid_argument on every rank when the ranks' parameter lists differ (one
  // all-reduce of a hash of the list).
  // `failure`: why this rank cannot go on (null: it can); every rank throws when any rank has one.
  void require_same_parameters_on_every_rank(const std::vector<PlanTensor>& tensors, std::exception_ptr failure);
  // One all-reduce: returns when no rank failed; else this rank rethrows its own `failure`, and
  // the others throw std::runtime_error saying how many ranks failed while `doing` what.
  void agree(std::exception_ptr failure, const std::string& doing);
  // A buffer allocated after construction, at a call every rank makes together: a failed
  // allocation is shared as agree() shares it.
  std::uintptr_t take_agreed(int64_t floats, const std::string& doing);
  std::vector<StateOwner> state_owners() const;
  // This rank's part of a whole-tensor state, entry by entry (null where the entry holds none):
  // Muon's momentum (its slice, or the whole matrix in deepspeed mode) or AdamW's moments'
  // slices and step. install_state uploads them and sets steps_.
  struct StatePiece {
    const float* first = nullptr;   // momentum | exp_avg
    const float* second = nullptr;  // exp_avg_sq
    int64_t step = 0;
  };
  void install_state(const std::vector<StatePiece>& pieces, int64_t steps_taken);
  // The partitioned state laid like this rank's partition of the flat buffer, elements
  // [from, from + count) of it: Muon's momentum and AdamW's exp_avg to `first`, exp_avg_sq to
  // `second` (a tensor has one or the other; padding is left as it was); and AdamW's step counts
  // per entry, from their first owners (collective: one all-reduce).
  void copy_state_to_partition(std::uintptr_t first, std::uintptr_t second, int64_t from, int64_t count) const;
  std::vector<int64_t> adam_step_counts();
  // The compiled Muon steps of the matrices this rank orthogonalizes whole (deepspeed mode), at
  // the step's addresses; also what the constructor compiles.
  std::vector<MuonStepTensor> owned_muon_steps() const;
  void compile_kernels();
  // Every allocation in memory_, freed with the optimizer (also when the constructor throws).
  struct Buffers {
    std::shared_ptr<MemorySpace> memory;
    std::vector<std::uintptr_t> addresses;
    int64_t bytes = 0;
    std::uintptr_t take(int64_t floats);
    ~Buffers();
  };
  std::uintptr_t at(std::uintptr_t base, int64_t floats) const { return base + static_cast<std::uintptr_t>(floats * 4); }
  void reduce_gradients(void* stream);
  // Flat-buffer coordinates [begin, begin + count): adds the parameters' gradients there (as f32)
  // into `destination` (its element 0 is flat element `begin`); missing gradients add nothing.
  void add_gradients(int64_t begin, int64_t count, std::uintptr_t destination, void* stream) const;
  // Stores f32 values of flat elements [begin, begin + count) into the parameters.
  void store_parameters(int64_t begin, int64_t count, std::uintptr_t source, void* stream) const;
  // One micro-batch of gradients reduce-scattered, bucket by bucket, into this rank's partition.
  void reduce_scatter_gradients(void* stream);
  void clip_gradients(StepReport& report, void* stream);
  // Every rank's `values` (the same count on every rank), rank after rank, through the step's
  // memory space (device engines move device buffers); bit-exact.
  std::vector<double> all_gather_doubles(const std::vector<double>& values);
  std::string locate_nonfinite() const;
  void muon_deepspeed(StepReport& report, void* stream);
  void muon_balanced(StepReport& report, void* stream);
  void orthogonalize(const MatrixPlan& plan, std::uintptr_t update, std::uintptr_t orthogonal, StepReport& report, void* stream);
  void adam(void* stream);
  void all_gather_parameters(void* stream);

  OptimizerSettings settings_;
  DistributedSettings distributed_;
  Communicator& communicator_;
  std::shared_ptr<MemorySpace> memory_;
  Buffers buffers_;
  PartitionPlan plan_;
  std::vector<Entry> entries_;
  // The flat f32 buffer in its own coordinates: at(flat_, i) is flat element i, for i in this
  // rank's gradient range (plan_.ranks[rank].gradient_begin..end: everything at stage 1; the
  // partition, widened to the Muon matrices it orthogonalizes whole in deepspeed mode, at stages
  // 2-3), the only part that is memory. It holds the accumulated (stage 1) or reduced gradients,
  // then this rank's updated parameters as the all-gather's input.
  std::uintptr_t flat_ = 0;
  // f32, world x staging_chunk_, stages 2-3: one bucket round of the reduce-scatter or the all-gather.
  std::uintptr_t staging_ = 0;
  int64_t staging_chunk_ = 0;  // elements of each rank's partition per round
  // f32, staging_chunk_, stages 2-3, from the second micro-batch a trainer accumulates on: a
  // later micro-batch's reduced round, before it is added.
  std::uintptr_t received_ = 0;
  // f32, partition_elements: the all-gather's input at stage 1, and at stage 3 between
  // micro-batches (allocated then).
  std::uintptr_t slice_ = 0;
  bool have_accumulated_ = false;
  std::unique_ptr<BlockOrthogonalizer> orthogonalizer_;
  MuonStepLauncher launcher_;
  int64_t bytes_last_step_ = 0;
  int64_t accumulated_bytes_ = 0;  // sent by accumulate_gradients since the last step
  int64_t steps_ = 0;
};

}  // namespace orthojit::runtime
