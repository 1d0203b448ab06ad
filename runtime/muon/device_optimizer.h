// The hybrid Muon + AdamW optimizer on memory it does not own the host side of: parameters,
// gradients and the optimizer state (momentum; exp_avg, exp_avg_sq) all live in one MemorySpace
// (memory_space.h), CUDA memory in training (the C API's memory = cuda), host memory in the tests.
// The formulas, settings, reports and state file are HybridOptimizer's (hybrid_optimizer.h), and so
// are the bits: the Muon parameters of a step go through compiled Muon steps
// (compiler/ir/muon_step.h; the momentum inside the first Newton–Schulz kernels, the update in the
// last one's epilogue), equal blocks of all parameters batched into one launch sequence per
// (rows, cols, gradient type, parameter type) and run by a MuonStepLauncher (on the device: one
// CUDA graph per sequence, captured once and replayed); AdamW parameters through the memory
// space's AdamW step (the generated kernel on the device).
//
// A step on CUDA memory is enqueued on the caller's stream with no device-wide synchronization.
// Its one wait: the non-finite gradient check (a generated kernel per gradient setting one device
// flag, copied back on the stream, then that stream synchronized), needed because a step with a
// NaN or an infinity in any gradient must change nothing. Host memory is touched only for scalars
// (the flag, the argument blocks of pointers and hyperparameters). A step that finds a non-finite
// value copies the gradients to the host to name the first one, as HybridOptimizer does.
// save_state, load_state and qk_clip copy through the host and synchronize the device; the state
// file streams through a host buffer of state_staging_bytes(), never the whole state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/memory_space.h"
#include "runtime/muon/muon_step_launcher.h"

namespace orthojit::runtime {

class DeviceOptimizer {
 public:
  // Every data and grad pointer of `parameters` is an address in `memory`. Tags and validates
  // them as HybridOptimizer does (std::invalid_argument naming the parameter) and allocates the
  // state in `memory`, zeroed. On a device memory space the Muon steps run on the cuda backend
  // whatever settings.muon.backend says; on host memory on that backend.
  DeviceOptimizer(std::vector<Parameter> parameters, OptimizerSettings settings, std::shared_ptr<MemorySpace> memory);
  ~DeviceOptimizer();
  DeviceOptimizer(const DeviceOptimizer&) = delete;
  DeviceOptimizer& operator=(const DeviceOptimizer&) = delete;

  // One step over every parameter with a gradient, enqueued on `stream` (a CUstream on CUDA
  // memory; ignored on host memory). orthogonalize_seconds: the Muon steps' time on host memory,
  // 0 on the device (enqueued, not waited for).
  StepReport step(void* stream);

  void set_learning_rates(double muon_lr, double adam_lr);
  const OptimizerSettings& settings() const { return settings_; }
  void set_gradient(const std::string& name, const void* grad, DType grad_dtype);
  void set_data(const std::string& name, void* data);

  std::vector<ParameterInfo> parameters() const;
  StateBytes state_bytes() const;
  int64_t steps_taken() const { return steps_; }
  const MemorySpace& memory() const { return *memory_; }
  // CUDA graphs replayed so far (0 on host memory).
  int graph_launches() const { return launcher_.graph_launches(); }

  // As HybridOptimizer::qk_clip, through a host copy of the two parameters.
  void qk_clip(const std::string& q_name, const std::string& k_name, int64_t head_rows, const std::vector<double>& s_max, double tau);

  // The state file of HybridOptimizer (the same tensors, names and metadata: either optimizer
  // loads what the other saved), streamed through one host buffer of state_staging_bytes():
  // the host holds that much of the state at a time, however large the model (a whole-state
  // host copy would be the size of the device's state, e.g. 32 GB of momentum for an 8B model).
  // load_state checks the file's tensors and its whole checksum before anything changes, so a
  // wrong or corrupt file changes nothing; a read that fails after those checks (the disk
  // failing mid-load) leaves the state partly loaded and says so; step and save_state then throw
  // InvalidStateError (runtime/errors.h) until a load succeeds.
  // `progress` reports the file's phases as they advance (runtime/muon/file_progress.h).
  void save_state(const std::string& path, const FileProgressCallback& progress = {}) const;
  void load_state(const std::string& path, const FileProgressCallback& progress = {});
  static constexpr int64_t kDefaultStateStagingBytes = int64_t{16} << 20;
  int64_t state_staging_bytes() const { return staging_bytes_; }
  // Throws std::invalid_argument unless bytes >= 1.
  void set_state_staging_bytes(int64_t bytes);
  // An f32 state buffer with the name of its tensor in the state file.
  struct StateBuffer {
    std::string name;
    std::uintptr_t address = 0;
    int64_t bytes = 0;
  };
  // The state copied to the host, in HybridOptimizer::state()'s form.
  std::map<std::string, HybridOptimizer::State> state() const;

 private:
  struct Entry {
    Parameter parameter;
    bool muon = false;
    MatrixPlan plan;
    std::uintptr_t momentum = 0, exp_avg = 0, exp_avg_sq = 0;  // in memory_
    int64_t adam_steps = 0;
  };
  // Every allocation in memory_, freed with the optimizer (also when the constructor throws).
  struct Allocations {
    std::shared_ptr<MemorySpace> memory;
    std::vector<std::uintptr_t> addresses;
    std::uintptr_t take(int64_t bytes);
    ~Allocations();
  };
  Entry& find(const std::string& name);
  std::vector<StateOwner> state_owners() const;
  std::vector<StateBuffer> state_buffers() const;  // in the state file's order
  void check_address(const std::string& name, const void* address, const char* what) const;
  std::string locate_nonfinite() const;

  OptimizerSettings settings_;
  std::shared_ptr<MemorySpace> memory_;
  Allocations allocations_;
  std::vector<Entry> entries_;
  std::uintptr_t zeros_ = 0;  // f32 zeros for the largest parameter (missing_grad = zero)
  std::unique_ptr<BlockOrthogonalizer> orthogonalizer_;
  MuonStepLauncher launcher_;
  int64_t steps_ = 0;
  int64_t staging_bytes_ = kDefaultStateStagingBytes;
  std::string partly_loaded_;  // why the state cannot be used (a load failed midway), or empty
};

}  // namespace orthojit::runtime
