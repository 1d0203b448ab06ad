// DeepSpeed's JSON configuration, read as DeepSpeed reads it: the optimizer section
//   "optimizer": {"type": "muon", "params": {"lr": ..., "momentum": ..., "weight_decay": ...,
//                 "muon_lr": ..., "adam_lr": ..., "ns_method": "gram" | "standard",
//                 "betas": [b1, b2], "eps": ..., "nesterov": ...}}
// becomes OptimizerSettings (starting from preset_settings("deepspeed"); `lr` sets both groups,
// `muon_lr` / `adam_lr` replace it in their group), and "zero_optimization" becomes ZeroSettings.
//
// In the sections orthojit interprets ("optimizer", "zero_optimization" with its offload objects,
// "bf16"/"fp16".enabled and the batch and clipping numbers) a wrong type names the path, the
// expected type and what was found, and an invalid value says what is valid. A key orthojit does
// not know is ignored, as DeepSpeed ignores it, and listed in DeepSpeedConfig::ignored_keys with
// the valid keys at its place (callers warn with describe_ignored_keys); `strict` makes it an
// error instead. Other top-level keys ("scheduler", "steps_per_print", ...) are accepted silently.
// DeepSpeed's Muon combination errors are reproduced with its messages (docs/muon.md).
//
// orthojit extras in optimizer.params: "orthojit_preset" (the preset to start from instead of
// "deepspeed", applied before every other key), "ns_steps", "lr_adjust", "momentum_kind",
// "adam_formula", "program", "backend", "threads", "tensor_layout", "conv_scale",
// "missing_grad", "tagging", "experts_as_batch".
//
// Hugging Face Trainer configs write "auto" for values the Trainer fills in. In
// "zero_optimization", "bf16"/"fp16".enabled and the batch/clipping numbers "auto" is accepted,
// keeps the default and is listed in DeepSpeedConfig::auto_keys; in optimizer.params it is an
// error (orthojit cannot guess a learning rate).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/muon/optimizer_settings.h"

namespace orthojit::runtime {

class DeepSpeedConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ZeroSettings {
  int stage = 0;  // 0..3
  bool reduce_scatter = true;
  bool overlap_comm = false;  // when not given: true at stage 3, false otherwise (DeepSpeed)
  bool contiguous_gradients = true;
  int64_t reduce_bucket_size = 500000000;
  bool reduce_bucket_size_given = false;  // the config set it (else DeepSpeed's default above)
  int64_t allgather_bucket_size = 500000000;
  bool allgather_partitions = true;
  bool use_multi_rank_bucket_allreduce = true;
  bool round_robin_gradients = false;
  bool elastic_checkpoint = false;
  bool load_from_fp32_weights = true;
  bool ignore_unused_parameters = true;
  int64_t sub_group_size = 1000000000;
  bool save_muon_momentum_buffer_in_memory = false;

  // "offload_optimizer": {"device", "nvme_path", "pin_memory", "buffer_count", "ratio", ...}
  std::string offload_optimizer_device = "none";  // none | cpu | nvme
  bool offload_pin_memory = false;
  std::string offload_optimizer_nvme_path;
  int64_t offload_optimizer_buffer_count = 4;
  double offload_optimizer_ratio = 1.0;
  // "offload_param" (stage 3 only): {"device", "nvme_path", "pin_memory", "buffer_count", ...}
  std::string offload_param_device = "none";  // none | cpu | nvme
  bool offload_param_pin_memory = false;

  // Stage 3 (also accepted without the "stage3_" prefix, as DeepSpeed does).
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  bool stage3_gather_16bit_weights_on_model_save = false;

  bool offloads_optimizer() const { return offload_optimizer_device != "none"; }
};

struct IgnoredKey {
  std::string path;        // JSON path of the unknown key, e.g. "optimizer.params.torch_adam"
  std::string valid_keys;  // the keys orthojit reads there, comma-separated
};

struct DeepSpeedConfig {
  OptimizerSettings optimizer;
  ZeroSettings zero;
  bool bf16 = false, fp16 = false;
  double gradient_clipping = 0;
  int64_t train_batch_size = 0, train_micro_batch_size_per_gpu = 0, gradient_accumulation_steps = 1;  // 0: not given
  std::vector<std::string> auto_keys;  // JSON paths given as "auto" (left at their defaults)
  std::vector<IgnoredKey> ignored_keys;  // unknown keys, ignored (not strict)
};

// One warning line per ignored key (empty when there are none).
std::string describe_ignored_keys(const DeepSpeedConfig& config);

// Throws DeepSpeedConfigError (see above).
DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& config, bool strict = false);
// Reads and parses the file; errors are prefixed with the path.
DeepSpeedConfig load_deepspeed_config(const std::string& path, bool strict = false);
// The same from the file's text; `origin` prefixes the errors (load_deepspeed_config passes the path).
DeepSpeedConfig parse_deepspeed_config_text(const std::string& text, const std::string& origin, bool strict = false);

}  // namespace orthojit::runtime
