// The optimizer behind a built C handle (include/orthojit/orthojit.h): one interface over the
// single-rank optimizers on host memory (HybridOptimizer) and on CUDA memory (DeviceOptimizer)
// and the distributed one (DistributedOptimizer, with the communicator the handle owns), so that
// each entry point of the C API is written once, whatever the handle was built as.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/parameter.h"
#include "runtime/zero/communicator.h"
#include "runtime/zero/distributed_optimizer.h"

namespace orthojit::runtime {

class CApiOptimizer {
 public:
  virtual ~CApiOptimizer() = default;
  // `stream`: a CUstream on CUDA memory (null: the legacy default stream), ignored on the host.
  virtual StepReport step(void* stream) = 0;
  virtual const OptimizerSettings& settings() const = 0;
  virtual void set_learning_rates(double muon_lr, double adam_lr) = 0;
  virtual std::vector<ParameterInfo> parameters() const = 0;
  virtual StateBytes state_bytes() const = 0;
  virtual int64_t steps_taken() const = 0;
  virtual void set_gradient(const std::string& name, const void* grad, DType grad_dtype) = 0;
  virtual void set_data(const std::string& name, void* data) = 0;
  virtual void qk_clip(const std::string& q, const std::string& k, int64_t head_rows, const std::vector<double>& s_max, double tau) = 0;
  virtual void save_state(const std::string& path, const FileProgressCallback& progress) = 0;
  virtual void load_state(const std::string& path, const FileProgressCallback& progress) = 0;
  // Distributed only; the single-rank optimizers throw InvalidStateError saying so.
  virtual void accumulate_gradients(void* stream);
  virtual void gather_parameters(void* stream);
  virtual const DistributedOptimizer* distributed() const { return nullptr; }
};

// The single-rank optimizer: on CUDA memory (`cuda_memory`) or host memory.
std::unique_ptr<CApiOptimizer> single_rank_optimizer(const std::vector<Parameter>& parameters, const OptimizerSettings& settings, bool cuda_memory);
// The distributed optimizer over `communicator` (which it keeps alive).
std::unique_ptr<CApiOptimizer> distributed_optimizer(const std::vector<Parameter>& parameters, const OptimizerSettings& settings, bool cuda_memory,
                                                     const DistributedSettings& distributed, std::shared_ptr<Communicator> communicator);

// The C API's "zero.*" option keys (zero.stage, zero.mode, zero.average_gradients,
// zero.gradients_reduced, zero.offload_optimizer, zero.alignment, zero.bucket_elements,
// zero.max_gradient_norm) on `settings`; UsageError naming what is valid. `key` without its
// "zero." prefix.
void apply_distributed_setting(DistributedSettings& settings, const std::string& key, const std::string& value);
// "zero.stage = 2\nzero.mode = deepspeed\n...": one line per key apply_distributed_setting takes.
std::string describe_distributed(const DistributedSettings& settings);

}  // namespace orthojit::runtime
