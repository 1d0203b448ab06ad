// DeepSpeed's JSON configuration -> OptimizerSettings and ZeroSettings.
#include "runtime/muon/deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "autotune/json_depth.h"

namespace orthojit::runtime {
namespace {

using nlohmann::json;

std::string found(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(value.type_name()) + " " + text;
}

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

[[noreturn]] void fail(const std::string& message) { throw DeepSpeedConfigError(message); }

// Where unknown keys go while one configuration is parsed: strict (an error) or into the
// result's ignored_keys, as DeepSpeed itself ignores keys it does not know.
struct UnknownKeys {
  bool strict = true;
  std::vector<IgnoredKey>* ignored = nullptr;
};
thread_local UnknownKeys* unknown_keys = nullptr;

// One JSON object of the configuration: checks its keys against the valid ones and reads typed
// values, naming the JSON path in every error.
class Section {
 public:
  Section(const json& object, std::string path, std::vector<std::string> keys, std::vector<std::string>* auto_keys)
      : object_(object), path_(std::move(path)), keys_(std::move(keys)), auto_keys_(auto_keys) {
    if (!object_.is_object()) fail(path_ + ": expected an object, found " + found(object_));
    for (const auto& [key, value] : object_.items()) {
      if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) continue;
      if (!unknown_keys || unknown_keys->strict) fail(path_ + ": unknown key \"" + key + "\" (at " + at(key) + "); valid keys: " + join(keys_));
      unknown_keys->ignored->push_back({at(key), join(keys_)});
      ignored_.push_back(key);
    }
  }

  std::string at(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return object_.contains(key) && std::find(ignored_.begin(), ignored_.end(), key) == ignored_.end(); }
  const json& raw(const std::string& key) const { return object_.at(key); }

  // Whether the value is the Hugging Face placeholder "auto" (and recorded as such). Where
  // auto_keys_ is null "auto" is refused with a hint.
  bool is_auto(const std::string& key) const {
    if (!has(key) || !object_.at(key).is_string() || object_.at(key).get<std::string>() != "auto") return false;
    if (!auto_keys_)
      fail(at(key) + ": \"auto\" is a Hugging Face Trainer placeholder; orthojit reads the configuration as DeepSpeed does, so give the value");
    auto_keys_->push_back(at(key));
    return true;
  }

  std::optional<double> number(const std::string& key) const {
    if (!has(key) || is_auto(key)) return std::nullopt;
    const json& value = object_.at(key);
    if (!value.is_number()) fail(at(key) + ": expected a number, found " + found(value));
    const double number = value.get<double>();
    if (!std::isfinite(number)) fail(at(key) + ": expected a finite number, found " + value.dump());
    return number;
  }
  std::optional<double> non_negative(const std::string& key) const {
    const auto value = number(key);
    if (value && *value < 0) fail(at(key) + " must be >= 0, found " + raw(key).dump());
    return value;
  }
  std::optional<double> unit_interval(const std::string& key) const {  // [0, 1)
    const auto value = number(key);
    if (value && !(*value >= 0 && *value < 1)) fail(at(key) + " must be in [0, 1), found " + raw(key).dump());
    return value;
  }
  std::optional<int64_t> integer(const std::string& key, int64_t minimum) const {
    if (!has(key) || is_auto(key)) return std::nullopt;
    const json& value = object_.at(key);
    // 2e8 is written as a float in many configs; an integral value is accepted (as pydantic does).
    if (!value.is_number() || (value.is_number_float() && (value.get<double>() != std::floor(value.get<double>()) || std::fabs(value.get<double>()) > 9e18)))
      fail(at(key) + ": expected an integer, found " + found(value));
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(at(key) + ": " + value.dump() + " is too large");
    const int64_t number = value.is_number_float() ? static_cast<int64_t>(value.get<double>()) : value.get<int64_t>();
    if (number < minimum) fail(at(key) + " must be >= " + std::to_string(minimum) + ", found " + value.dump());
    return number;
  }
  std::optional<bool> boolean(const std::string& key) const {
    if (!has(key) || is_auto(key)) return std::nullopt;
    const json& value = object_.at(key);
    if (!value.is_boolean()) fail(at(key) + ": expected true or false, found " + found(value));
    return value.get<bool>();
  }
  std::optional<std::string> string(const std::string& key) const {
    if (!has(key) || is_auto(key)) return std::nullopt;
    const json& value = object_.at(key);
    if (!value.is_string()) fail(at(key) + ": expected a string, found " + found(value));
    return value.get<std::string>();
  }
  std::optional<std::string> choice(const std::string& key, const std::vector<std::string>& valid) const {
    const auto value = string(key);
    if (value && std::find(valid.begin(), valid.end(), *value) == valid.end())
      fail(at(key) + ": \"" + *value + "\" is not one of " + join(valid));
    return value;
  }

 private:
  const json& object_;
  std::string path_;
  std::vector<std::string> keys_;
  std::vector<std::string>* auto_keys_;
  std::vector<std::string> ignored_;  // unknown keys, ignored (not strict)
};

template <typename T>
void set(T& field, const std::optional<T>& value) {
  if (value) field = *value;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

OptimizerSettings parse_optimizer(const json& section) {
  const Section optimizer(section, "optimizer", {"type", "params"}, nullptr);
  if (!optimizer.has("type")) fail("optimizer: has no \"type\"; orthojit runs Muon: \"optimizer\": {\"type\": \"muon\", \"params\": {...}}");
  const std::string type = *optimizer.string("type");
  if (lower(type) != "muon")
    fail("optimizer.type: \"" + type + "\" is not supported; orthojit runs Muon (with AdamW for embeddings, lm_head and 1-D parameters): use \"type\": \"muon\"");

  static const json empty = json::object();
  const Section params(optimizer.has("params") ? optimizer.raw("params") : empty, "optimizer.params",
                       {"lr", "momentum", "weight_decay", "muon_lr", "adam_lr", "ns_method", "betas", "eps", "nesterov", "orthojit_preset", "ns_steps",
                        "lr_adjust", "momentum_kind", "adam_formula", "program", "backend", "threads", "experts_as_batch", "tensor_layout", "conv_scale",
                        "missing_grad", "tagging"},
                       nullptr);

  OptimizerSettings settings;
  const std::string preset = params.string("orthojit_preset").value_or("deepspeed");
  try {
    settings = preset_settings(preset);
  } catch (const std::invalid_argument& error) {
    fail(params.at("orthojit_preset") + ": " + error.what());
  }
  MuonGroupSettings& muon = settings.muon;
  AdamGroupSettings& adam = settings.adam;

  // DeepSpeed: both groups take lr; muon_lr / adam_lr replace it in their group.
  if (const auto lr = params.non_negative("lr")) muon.lr = adam.lr = *lr;
  set(muon.lr, params.non_negative("muon_lr"));
  set(adam.lr, params.non_negative("adam_lr"));
  set(muon.momentum, params.unit_interval("momentum"));
  if (const auto wd = params.non_negative("weight_decay")) muon.weight_decay = adam.weight_decay = *wd;
  set(muon.nesterov, params.boolean("nesterov"));
  if (params.has("betas")) {
    const json& betas = params.raw("betas");
    if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number())
      fail(params.at("betas") + ": expected an array of 2 numbers [beta1, beta2], found " + found(betas));
    for (size_t i = 0; i < 2; ++i) {
      const double beta = betas[i].get<double>();
      if (!(beta >= 0 && beta < 1)) fail(params.at("betas") + ": beta" + std::to_string(i + 1) + " must be in [0, 1), found " + betas[i].dump());
    }
    adam.beta1 = betas[0].get<double>();
    adam.beta2 = betas[1].get<double>();
  }
  if (const auto eps = params.number("eps")) {
    if (!(*eps > 0)) fail(params.at("eps") + " must be > 0, found " + params.raw("eps").dump());
    adam.eps = *eps;
  }
  if (const auto method = params.string("ns_method")) {
    if (*method == "gram") {
      muon.strategy = "gram";
      muon.precision = ScalarType::F16;
      muon.gram_restarts = std::vector<int>{2};
      muon.square_uses_standard = true;
      muon.square_precision.reset();  // the standard iteration on the same f16 values (original_muon.py)
    } else if (*method == "standard") {
      muon.strategy = "standard";
      muon.precision = ScalarType::BF16;
      muon.gram_restarts.reset();
    } else {
      fail(params.at("ns_method") + ": \"" + *method + "\" is not a Newton-Schulz method; expected \"gram\" or \"standard\"");
    }
  }
  if (const auto steps = params.integer("ns_steps", 1)) {
    if (*steps > 1000) fail(params.at("ns_steps") + " must be <= 1000, found " + std::to_string(*steps));
    muon.ns_steps = static_cast<int>(*steps);
  }
  if (const auto text = params.string("lr_adjust")) {
    const auto adjust = parse_lr_adjust(*text);
    if (!adjust) fail(params.at("lr_adjust") + ": \"" + *text + "\" is not one of none, original, match_rms_adamw, spectral");
    muon.lr_adjust = *adjust;
  }
  if (const auto text = params.string("momentum_kind")) {
    const auto kind = parse_momentum_kind(*text);
    if (!kind) fail(params.at("momentum_kind") + ": \"" + *text + "\" is not one of ema, sum");
    muon.momentum_kind = *kind;
  }
  if (const auto text = params.string("adam_formula")) {
    const auto formula = parse_adam_formula(*text);
    if (!formula) fail(params.at("adam_formula") + ": \"" + *text + "\" is not one of standard, moonlight");
    adam.formula = *formula;
  }
  set(muon.program, params.string("program"));
  set(muon.backend, params.choice("backend", {"auto", "ref", "cpu", "cuda"}));
  if (const auto threads = params.integer("threads", 0)) {
    if (*threads > kMaxMuonThreads) fail(params.at("threads") + " must be <= " + std::to_string(kMaxMuonThreads) + ", found " + std::to_string(*threads));
    muon.threads = static_cast<int>(*threads);
  }
  if (const auto batch = params.boolean("experts_as_batch")) settings.tensor_layout = *batch ? MatrixLayout::Batch : MatrixLayout::Flatten;
  if (const auto text = params.choice("tensor_layout", {"flatten", "batch", "trailing"})) settings.tensor_layout = *parse_matrix_layout(*text);
  if (const auto text = params.choice("conv_scale", {"kernel", "matrix"})) settings.conv_scale = *parse_conv_scale(*text);
  if (const auto text = params.choice("missing_grad", {"skip", "zero"})) settings.missing_gradient = *parse_missing_gradient(*text);
  if (const auto text = params.choice("tagging", {"deepspeed", "moonlight"})) settings.tagging = *parse_tagging_rule(*text);
  return settings;
}

void parse_offload(const json& section, const std::string& path, bool optimizer, ZeroSettings& zero, std::vector<std::string>& auto_keys) {
  std::vector<std::string> keys = {"device", "nvme_path", "pin_memory", "buffer_count"};
  if (optimizer) keys.insert(keys.end(), {"pipeline_read", "pipeline_write", "fast_init", "ratio", "pipeline", "buffer_size"});
  else keys.insert(keys.end(), {"buffer_size", "max_in_cpu"});
  const Section offload(section, path, keys, &auto_keys);
  const auto device = offload.choice("device", {"none", "cpu", "nvme"});
  if (device == "nvme" && !offload.has("nvme_path")) fail(offload.at("nvme_path") + ": needed with \"device\": \"nvme\"");
  const auto nvme_path = offload.string("nvme_path");
  const auto pin = offload.boolean("pin_memory");
  const auto buffer_count = offload.integer("buffer_count", 1);
  offload.integer("buffer_size", 1);
  if (optimizer) {
    for (const char* flag : {"pipeline_read", "pipeline_write", "fast_init", "pipeline"}) offload.boolean(flag);
    if (const auto ratio = offload.number("ratio")) {
      if (!(*ratio > 0 && *ratio <= 1)) fail(offload.at("ratio") + " must be in (0, 1], found " + offload.raw("ratio").dump());
      zero.offload_optimizer_ratio = *ratio;
    }
    set(zero.offload_optimizer_device, device);
    set(zero.offload_optimizer_nvme_path, nvme_path);
    set(zero.offload_pin_memory, pin);
    set(zero.offload_optimizer_buffer_count, buffer_count);
  } else {
    offload.integer("max_in_cpu", 0);
    set(zero.offload_param_device, device);
    set(zero.offload_param_pin_memory, pin);
  }
}

ZeroSettings parse_zero(const json& section, std::vector<std::string>& auto_keys) {
  // DeepSpeed's zero_optimization keys. The quantization / hierarchical-partitioning features
  // change the arithmetic, which orthojit's bit-exact contract does not allow: accepted only at
  // their defaults ("off").
  const std::vector<std::string> off_only = {"zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients",
                                             "zeropp_loco_param", "zero_hpz_partition_size", "mics_shard_size", "mics_hierarchical_params_gather"};
  // Accepted (validated by type) and without effect here: memory and scheduling knobs of DeepSpeed's
  // own implementation.
  const std::vector<std::string> ignored_flags = {"memory_efficient_linear", "pipeline_loading_checkpoint", "override_module_apply",
                                                  "log_trace_cache_warnings", "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params",
                                                  "legacy_stage1", "stage3_allgather_sequential", "cpu_offload_use_pin_memory"};
  const std::vector<std::string> ignored_counts = {"model_persistence_threshold", "module_granularity_threshold"};
  std::vector<std::string> keys = {"stage",
                                   "reduce_scatter",
                                   "overlap_comm",
                                   "contiguous_gradients",
                                   "reduce_bucket_size",
                                   "allgather_bucket_size",
                                   "allgather_partitions",
                                   "use_multi_rank_bucket_allreduce",
                                   "round_robin_gradients",
                                   "elastic_checkpoint",
                                   "load_from_fp32_weights",
                                   "ignore_unused_parameters",
                                   "sub_group_size",
                                   "save_muon_momentum_buffer_in_memory",
                                   "offload_optimizer",
                                   "offload_param",
                                   "cpu_offload",
                                   "cpu_offload_param",
                                   "stage3_prefetch_bucket_size",
                                   "prefetch_bucket_size",
                                   "stage3_param_persistence_threshold",
                                   "param_persistence_threshold",
                                   "stage3_max_live_parameters",
                                   "max_live_parameters",
                                   "stage3_max_reuse_distance",
                                   "max_reuse_distance",
                                   "stage3_gather_16bit_weights_on_model_save",
                                   "stage3_gather_fp16_weights_on_model_save",
                                   "gather_16bit_weights_on_model_save"};
  keys.insert(keys.end(), off_only.begin(), off_only.end());
  keys.insert(keys.end(), ignored_flags.begin(), ignored_flags.end());
  keys.insert(keys.end(), ignored_counts.begin(), ignored_counts.end());
  const Section zero_section(section, "zero_optimization", keys, &auto_keys);

  ZeroSettings zero;
  if (const auto stage = zero_section.integer("stage", INT64_MIN)) {
    if (*stage < 0 || *stage > 3) fail(zero_section.at("stage") + " must be 0, 1, 2 or 3, found " + std::to_string(*stage));
    zero.stage = static_cast<int>(*stage);
  }
  set(zero.reduce_scatter, zero_section.boolean("reduce_scatter"));
  zero.overlap_comm = zero.stage == 3;
  set(zero.overlap_comm, zero_section.boolean("overlap_comm"));
  set(zero.contiguous_gradients, zero_section.boolean("contiguous_gradients"));
  if (const auto size = zero_section.integer("reduce_bucket_size", 1)) {
    zero.reduce_bucket_size = *size;
    zero.reduce_bucket_size_given = true;
  }
  set(zero.allgather_bucket_size, zero_section.integer("allgather_bucket_size", 1));
  set(zero.allgather_partitions, zero_section.boolean("allgather_partitions"));
  set(zero.use_multi_rank_bucket_allreduce, zero_section.boolean("use_multi_rank_bucket_allreduce"));
  set(zero.round_robin_gradients, zero_section.boolean("round_robin_gradients"));
  set(zero.elastic_checkpoint, zero_section.boolean("elastic_checkpoint"));
  set(zero.load_from_fp32_weights, zero_section.boolean("load_from_fp32_weights"));
  set(zero.ignore_unused_parameters, zero_section.boolean("ignore_unused_parameters"));
  set(zero.sub_group_size, zero_section.integer("sub_group_size", 0));
  set(zero.save_muon_momentum_buffer_in_memory, zero_section.boolean("save_muon_momentum_buffer_in_memory"));

  // Stage 3 knobs, under either name.
  auto either = [&](const char* prefixed, const char* plain, int64_t minimum) {
    if (zero_section.has(prefixed) && zero_section.has(plain))
      fail("zero_optimization: \"" + std::string(prefixed) + "\" and \"" + plain + "\" are the same setting; give one");
    return zero_section.has(prefixed) ? zero_section.integer(prefixed, minimum) : zero_section.integer(plain, minimum);
  };
  set(zero.stage3_prefetch_bucket_size, either("stage3_prefetch_bucket_size", "prefetch_bucket_size", 0));
  set(zero.stage3_param_persistence_threshold, either("stage3_param_persistence_threshold", "param_persistence_threshold", 0));
  set(zero.stage3_max_live_parameters, either("stage3_max_live_parameters", "max_live_parameters", 0));
  set(zero.stage3_max_reuse_distance, either("stage3_max_reuse_distance", "max_reuse_distance", 0));
  for (const char* key : {"stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save", "gather_16bit_weights_on_model_save"})
    set(zero.stage3_gather_16bit_weights_on_model_save, zero_section.boolean(key));

  for (const auto& key : ignored_flags) zero_section.boolean(key);
  for (const auto& key : ignored_counts) zero_section.integer(key, INT64_MIN);
  for (const auto& key : off_only) {
    if (!zero_section.has(key) || zero_section.is_auto(key)) continue;
    const json& value = zero_section.raw(key);
    const bool off = key == "zero_hpz_partition_size" ? value == 1 : key == "mics_shard_size" ? (value == -1 || value == 0) : value == false;
    if (!off) fail(zero_section.at(key) + " = " + value.dump() + " is not supported: orthojit's ZeRO keeps full-precision, flat partitions (the bit-exact contract)");
  }

  // Offload: the objects, or DeepSpeed's older booleans.
  if (zero_section.has("offload_optimizer") && !zero_section.raw("offload_optimizer").is_null())
    parse_offload(zero_section.raw("offload_optimizer"), zero_section.at("offload_optimizer"), true, zero, auto_keys);
  if (zero_section.has("offload_param") && !zero_section.raw("offload_param").is_null())
    parse_offload(zero_section.raw("offload_param"), zero_section.at("offload_param"), false, zero, auto_keys);
  if (zero_section.boolean("cpu_offload").value_or(false)) {
    if (zero.offloads_optimizer()) fail("zero_optimization: \"cpu_offload\" and \"offload_optimizer\" both set; use \"offload_optimizer\"");
    zero.offload_optimizer_device = "cpu";
    zero.offload_pin_memory = zero_section.boolean("cpu_offload_use_pin_memory").value_or(false);
  }
  if (zero_section.boolean("cpu_offload_param").value_or(false)) {
    if (zero.offload_param_device != "none") fail("zero_optimization: \"cpu_offload_param\" and \"offload_param\" both set; use \"offload_param\"");
    zero.offload_param_device = "cpu";
  }
  if (zero.offloads_optimizer() && zero.stage == 0)
    fail("zero_optimization.offload_optimizer: optimizer offload needs ZeRO stage 1, 2 or 3 (stage is 0)");
  if (zero.offload_optimizer_device == "nvme" && zero.stage != 3)
    fail("zero_optimization.offload_optimizer.device: \"nvme\" needs ZeRO stage 3 (ZeRO-Infinity); stage is " + std::to_string(zero.stage));
  if (zero.offload_param_device != "none" && zero.stage != 3)
    fail("zero_optimization.offload_param: parameter offload needs ZeRO stage 3; stage is " + std::to_string(zero.stage));

  // DeepSpeed's Muon combination errors (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py).
  if ((zero.stage == 1 || zero.stage == 2) && zero.reduce_scatter && zero.offloads_optimizer())
    fail("Muon with reduce scatter does not support optimizer offload (zero_optimization: stage " + std::to_string(zero.stage) +
         ", reduce_scatter true, offload_optimizer device " + zero.offload_optimizer_device +
         "); set \"reduce_scatter\": false or remove the optimizer offload");
  if (zero.stage == 3 && zero.reduce_scatter)
    fail("Muon and reduce scatter cannot be used together (zero_optimization: stage 3, reduce_scatter is true, DeepSpeed's default); "
         "set \"reduce_scatter\": false");
  return zero;
}

// "bf16": {"enabled": true, ...} (other keys are DeepSpeed's own and ignored), or a bare boolean.
bool parse_precision_flag(const json& value, const std::string& path, std::vector<std::string>& auto_keys) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_null()) return false;
  if (!value.is_object()) fail(path + ": expected an object such as {\"enabled\": true}, found " + found(value));
  if (!value.contains("enabled")) return false;
  const json& enabled = value.at("enabled");
  if (enabled.is_string() && enabled.get<std::string>() == "auto") {
    auto_keys.push_back(path + ".enabled");
    return false;
  }
  if (!enabled.is_boolean()) fail(path + ".enabled: expected true or false, found " + found(enabled));
  return enabled.get<bool>();
}

}  // namespace

std::string describe_ignored_keys(const DeepSpeedConfig& config) {
  std::string text;
  for (const IgnoredKey& key : config.ignored_keys)
    text += "ignored unknown key " + key.path + " (DeepSpeed ignores it too; strict reading refuses it); valid keys there: " + key.valid_keys + "\n";
  return text;
}

DeepSpeedConfig parse_deepspeed_config(const json& config, bool strict) {
  if (!config.is_object()) fail("the DeepSpeed configuration must be a JSON object, found " + found(config));
  DeepSpeedConfig result;
  UnknownKeys policy{strict, &result.ignored_keys};
  UnknownKeys* const outer = unknown_keys;
  unknown_keys = &policy;
  struct Restore {
    UnknownKeys* outer;
    ~Restore() { unknown_keys = outer; }
  } restore{outer};
  if (!config.contains("optimizer") || config.at("optimizer").is_null())
    fail("the DeepSpeed configuration has no \"optimizer\" section; orthojit runs Muon: \"optimizer\": {\"type\": \"muon\", \"params\": {...}}");
  result.optimizer = parse_optimizer(config.at("optimizer"));
  if (config.contains("zero_optimization") && !config.at("zero_optimization").is_null())
    result.zero = parse_zero(config.at("zero_optimization"), result.auto_keys);
  else
    result.zero.overlap_comm = false;

  for (const char* key : {"bf16", "bfloat16"})
    if (config.contains(key)) result.bf16 = result.bf16 || parse_precision_flag(config.at(key), key, result.auto_keys);
  if (config.contains("fp16")) result.fp16 = parse_precision_flag(config.at("fp16"), "fp16", result.auto_keys);
  if (result.bf16 && result.fp16) fail("bf16 and fp16 modes cannot be simultaneously enabled (\"bf16\".enabled and \"fp16\".enabled are both true)");

  // The top-level numbers orthojit reads; every other top-level key is accepted as is.
  std::vector<std::string> top_keys;
  for (const auto& [key, value] : config.items()) top_keys.push_back(key);
  json numbers = json::object();
  for (const char* key : {"gradient_clipping", "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    if (config.contains(key)) numbers[key] = config.at(key);
  const Section top(numbers, "", {"gradient_clipping", "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"},
                    &result.auto_keys);
  set(result.gradient_clipping, top.non_negative("gradient_clipping"));
  set(result.train_batch_size, top.integer("train_batch_size", 1));
  set(result.train_micro_batch_size_per_gpu, top.integer("train_micro_batch_size_per_gpu", 1));
  set(result.gradient_accumulation_steps, top.integer("gradient_accumulation_steps", 1));
  if (result.train_batch_size > 0 && result.train_micro_batch_size_per_gpu > 0 &&
      result.train_batch_size % (result.train_micro_batch_size_per_gpu * result.gradient_accumulation_steps) != 0)
    fail("train_batch_size " + std::to_string(result.train_batch_size) + " is not train_micro_batch_size_per_gpu (" +
         std::to_string(result.train_micro_batch_size_per_gpu) + ") * gradient_accumulation_steps (" + std::to_string(result.gradient_accumulation_steps) +
         ") * the number of data-parallel ranks");
  return result;
}

DeepSpeedConfig load_deepspeed_config(const std::string& path, bool strict) {
  std::ifstream in(path);
  if (!in) throw DeepSpeedConfigError(path + ": cannot open the DeepSpeed configuration for reading");
  std::stringstream text;
  text << in.rdbuf();
  return parse_deepspeed_config_text(text.str(), path, strict);
}

DeepSpeedConfig parse_deepspeed_config_text(const std::string& text, const std::string& origin, bool strict) {
  if (const std::string deep = autotune::json_depth_problem(text); !deep.empty()) throw DeepSpeedConfigError(origin + ": " + deep);
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& error) {
    // parse_error, and out_of_range for a number beyond a double ("eps": 1e508; found by
    // tests/fuzz/fuzz_deepspeed_config.cpp).
    throw DeepSpeedConfigError(origin + ": not valid JSON: " + error.what());
  }
  try {
    return parse_deepspeed_config(config, strict);
  } catch (const DeepSpeedConfigError& error) {
    throw DeepSpeedConfigError(origin + ": " + error.what());
  }
}

}  // namespace orthojit::runtime
