// The C handle's optimizer adapters (see c_api_optimizer.h).
#include "runtime/c_api_optimizer.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include "runtime/errors.h"
#include "runtime/muon/device_optimizer.h"
#include "runtime/muon/memory_space.h"
#include "runtime/shared_options.h"

namespace orthojit::runtime {

void CApiOptimizer::accumulate_gradients(void*) {
  throw InvalidStateError("accumulating micro-batches is for a distributed optimizer (oj_optimizer_distribute_mpi or _nccl before build); a "
                          "single-rank optimizer steps on the gradients it is given: accumulate them in the trainer");
}

void CApiOptimizer::gather_parameters(void*) {
  throw InvalidStateError("gathering parameters is for a distributed optimizer at ZeRO stage 3; this optimizer's parameters are always whole");
}

namespace {

// The single-rank optimizers share one shape of interface; one adapter serves both.
template <typename Optimizer>
class SingleRank final : public CApiOptimizer {
 public:
  explicit SingleRank(std::unique_ptr<Optimizer> optimizer) : optimizer_(std::move(optimizer)) {}
  StepReport step(void* stream) override {
    if constexpr (std::is_same_v<Optimizer, DeviceOptimizer>) return optimizer_->step(stream);
    else return optimizer_->step();
  }
  const OptimizerSettings& settings() const override { return optimizer_->settings(); }
  void set_learning_rates(double muon_lr, double adam_lr) override { optimizer_->set_learning_rates(muon_lr, adam_lr); }
  std::vector<ParameterInfo> parameters() const override { return optimizer_->parameters(); }
  StateBytes state_bytes() const override { return optimizer_->state_bytes(); }
  int64_t steps_taken() const override { return optimizer_->steps_taken(); }
  void set_gradient(const std::string& name, const void* grad, DType grad_dtype) override { optimizer_->set_gradient(name, grad, grad_dtype); }
  void set_data(const std::string& name, void* data) override { optimizer_->set_data(name, data); }
  void qk_clip(const std::string& q, const std::string& k, int64_t head_rows, const std::vector<double>& s_max, double tau) override {
    optimizer_->qk_clip(q, k, head_rows, s_max, tau);
  }
  void save_state(const std::string& path, const FileProgressCallback& progress) override { optimizer_->save_state(path, progress); }
  void load_state(const std::string& path, const FileProgressCallback& progress) override { optimizer_->load_state(path, progress); }

 private:
  std::unique_ptr<Optimizer> optimizer_;
};

class Distributed final : public CApiOptimizer {
 public:
  Distributed(const std::vector<Parameter>& parameters, const OptimizerSettings& settings, bool cuda_memory, const DistributedSettings& distributed,
              std::shared_ptr<Communicator> communicator)
      : communicator_(std::move(communicator)),
        optimizer_(parameters, settings, distributed, *communicator_, cuda_memory ? cuda_memory_space() : host_memory()) {}
  StepReport step(void* stream) override { return optimizer_.step(stream); }
  const OptimizerSettings& settings() const override { return optimizer_.optimizer_settings(); }
  void set_learning_rates(double muon_lr, double adam_lr) override {
    StepHyperparameters values = optimizer_.hyperparameters();
    values.muon_lr = muon_lr;
    values.adam_lr = adam_lr;
    optimizer_.set_hyperparameters(values);
  }
  std::vector<ParameterInfo> parameters() const override { return optimizer_.parameters(); }
  StateBytes state_bytes() const override { return optimizer_.state_bytes(); }
  int64_t steps_taken() const override { return optimizer_.steps_taken(); }
  void set_gradient(const std::string& name, const void* grad, DType grad_dtype) override { optimizer_.set_gradient(name, grad, grad_dtype); }
  void set_data(const std::string& name, void* data) override { optimizer_.set_data(name, data); }
  void qk_clip(const std::string& q, const std::string& k, int64_t head_rows, const std::vector<double>& s_max, double tau) override {
    optimizer_.qk_clip(q, k, head_rows, s_max, tau);
  }
  void save_state(const std::string& path, const FileProgressCallback& progress) override { optimizer_.save_state(path, {}, progress); }
  void load_state(const std::string& path, const FileProgressCallback& progress) override { optimizer_.load_state(path, "", progress); }
  void accumulate_gradients(void* stream) override { optimizer_.accumulate_gradients(stream); }
  void gather_parameters(void* stream) override { optimizer_.gather_parameters(stream); }
  const DistributedOptimizer* distributed() const override { return &optimizer_; }

 private:
  static std::shared_ptr<MemorySpace> cuda_memory_space() { return cuda_memory(); }
  std::shared_ptr<Communicator> communicator_;  // before the optimizer: destroyed after it
  DistributedOptimizer optimizer_;
};

}  // namespace

std::unique_ptr<CApiOptimizer> single_rank_optimizer(const std::vector<Parameter>& parameters, const OptimizerSettings& settings, bool cuda_memory) {
  if (cuda_memory) return std::make_unique<SingleRank<DeviceOptimizer>>(std::make_unique<DeviceOptimizer>(parameters, settings, runtime::cuda_memory()));
  return std::make_unique<SingleRank<HybridOptimizer>>(std::make_unique<HybridOptimizer>(parameters, settings));
}

std::unique_ptr<CApiOptimizer> distributed_optimizer(const std::vector<Parameter>& parameters, const OptimizerSettings& settings, bool cuda_memory,
                                                     const DistributedSettings& distributed, std::shared_ptr<Communicator> communicator) {
  return std::make_unique<Distributed>(parameters, settings, cuda_memory, distributed, std::move(communicator));
}

void apply_distributed_setting(DistributedSettings& settings, const std::string& key, const std::string& value) {
  const std::string name = "zero." + key;
  // A whole number in [least, 2^53] (exact in the double the parser reads).
  auto whole = [&](double least) {
    const double number = parse_setting_number(name, value);
    if (number != std::floor(number) || number < least || number > 9007199254740992.0)
      throw UsageError(name + " must be a whole number >= " + std::to_string(static_cast<int64_t>(least)) + " (got " + value + ")");
    return static_cast<int64_t>(number);
  };
  try {
    if (key == "stage") settings.stage = parse_setting_integer(name, value, 1, 3);
    else if (key == "mode") {
      if (value != "deepspeed" && value != "balanced") throw UsageError(name + " '" + value + "': expected deepspeed or balanced");
      settings.mode = parse_plan_mode(value);
    }
    else if (key == "average_gradients") settings.average_gradients = parse_setting_bool(name, value);
    else if (key == "gradients_reduced") settings.gradients_reduced = parse_setting_bool(name, value);
    else if (key == "offload_optimizer") settings.offload_optimizer = parse_setting_bool(name, value);
    else if (key == "alignment") settings.alignment = whole(1);
    else if (key == "bucket_elements") settings.bucket_elements = whole(1);
    else if (key == "max_gradient_norm") {
      const double norm = parse_setting_number(name, value);
      if (norm < 0) throw UsageError(name + " must be >= 0 (0: no clipping; got " + value + ")");
      settings.max_gradient_norm = norm;
    } else {
      throw UsageError("unknown setting '" + name + "'; the zero.* keys: zero.stage, zero.mode, zero.average_gradients, zero.gradients_reduced, "
                       "zero.offload_optimizer, zero.alignment, zero.bucket_elements, zero.max_gradient_norm");
    }
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
}

std::string describe_distributed(const DistributedSettings& settings) {
  auto flag = [](bool value) { return value ? "true" : "false"; };
  char norm[32];
  std::snprintf(norm, sizeof norm, "%.17g", settings.max_gradient_norm);
  return "zero.stage = " + std::to_string(settings.stage) + "\nzero.mode = " + to_string(settings.mode) +
         "\nzero.average_gradients = " + flag(settings.average_gradients) + "\nzero.gradients_reduced = " + flag(settings.gradients_reduced) +
         "\nzero.offload_optimizer = " + flag(settings.offload_optimizer) + "\nzero.alignment = " + std::to_string(settings.alignment) +
         "\nzero.bucket_elements = " + std::to_string(settings.bucket_elements) + "\nzero.max_gradient_norm = " + norm + "\n";
}

}  // namespace orthojit::runtime
