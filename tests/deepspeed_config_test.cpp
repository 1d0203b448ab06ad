// DeepSpeed's JSON configuration read as is: the Muon blog's configuration, DeepSpeed's defaults,
// lr / muon_lr / adam_lr, ns_method, ZeRO settings, and an error naming the path for every
// unknown key, wrong type, invalid value and DeepSpeed's own Muon combination errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/muon/deepspeed_config.h"

namespace orthojit {
namespace {

using nlohmann::json;
using runtime::DeepSpeedConfig;
using runtime::parse_deepspeed_config;

// Strict reading: unknown keys are errors too (the lenient default is tested on its own below).
std::string error_of(const json& config) {
  try {
    parse_deepspeed_config(config, /*strict=*/true);
  } catch (const runtime::DeepSpeedConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

json with_params(const json& params) { return {{"optimizer", {{"type", "muon"}, {"params", params}}}}; }

TEST(DeepSpeedConfig, ReadsTheBlogConfiguration) {
  // The DeepSpeed Muon blog's example configuration.
  const json config = json::parse(R"({
    "train_batch_size": 32,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "optimizer": {
      "type": "Muon",
      "params": {"muon_lr": 1e-4, "adam_lr": 2e-6, "momentum": 0.95, "weight_decay": 0.1, "betas": [0.9, 0.95], "eps": 1e-8}
    },
    "bf16": {"enabled": true},
    "zero_optimization": {"stage": 2, "reduce_scatter": true, "allgather_bucket_size": 2e8, "overlap_comm": true},
    "gradient_clipping": 1.0,
    "steps_per_print": 10,
    "wall_clock_breakdown": false,
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}
  })");
  const DeepSpeedConfig parsed = parse_deepspeed_config(config);
  const runtime::OptimizerSettings& s = parsed.optimizer;
  EXPECT_EQ(s.preset, "deepspeed");
  EXPECT_DOUBLE_EQ(s.muon.lr, 1e-4);
  EXPECT_DOUBLE_EQ(s.adam.lr, 2e-6);
  EXPECT_DOUBLE_EQ(s.muon.momentum, 0.95);
  EXPECT_DOUBLE_EQ(s.muon.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(s.adam.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(s.adam.beta1, 0.9);
  EXPECT_DOUBLE_EQ(s.adam.beta2, 0.95);
  EXPECT_DOUBLE_EQ(s.adam.eps, 1e-8);
  EXPECT_TRUE(s.muon.nesterov);
  EXPECT_EQ(s.muon.momentum_kind, runtime::MomentumKind::Ema);
  EXPECT_EQ(s.muon.lr_adjust, runtime::LrAdjust::Original);
  EXPECT_EQ(s.muon.strategy, "gram");  // DeepSpeed's default ns_method
  EXPECT_EQ(s.muon.precision, ScalarType::F16);
  EXPECT_EQ(s.muon.gram_restarts, std::vector<int>{2});
  EXPECT_EQ(parsed.zero.stage, 2);
  EXPECT_TRUE(parsed.zero.reduce_scatter);
  EXPECT_TRUE(parsed.zero.overlap_comm);
  EXPECT_EQ(parsed.zero.allgather_bucket_size, 200000000);
  EXPECT_EQ(parsed.zero.reduce_bucket_size, 500000000);
  EXPECT_FALSE(parsed.zero.offloads_optimizer());
  EXPECT_TRUE(parsed.bf16);
  EXPECT_FALSE(parsed.fp16);
  EXPECT_DOUBLE_EQ(parsed.gradient_clipping, 1.0);
  EXPECT_EQ(parsed.train_batch_size, 32);
  EXPECT_EQ(parsed.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(parsed.gradient_accumulation_steps, 1);
  EXPECT_TRUE(parsed.auto_keys.empty());
}

TEST(DeepSpeedConfig, EmptyParamsGiveDeepSpeedsDefaults) {
  for (const json& config : {with_params(json::object()), json{{"optimizer", {{"type", "muon"}}}}}) {
    const DeepSpeedConfig parsed = parse_deepspeed_config(config);
    const auto& muon = parsed.optimizer.muon;
    const auto& adam = parsed.optimizer.adam;
    EXPECT_DOUBLE_EQ(muon.lr, 0.02);
    EXPECT_DOUBLE_EQ(muon.momentum, 0.95);
    EXPECT_DOUBLE_EQ(muon.weight_decay, 0);
    EXPECT_EQ(muon.strategy, "gram");
    EXPECT_EQ(muon.precision, ScalarType::F16);
    EXPECT_DOUBLE_EQ(adam.lr, 3e-4);
    EXPECT_DOUBLE_EQ(adam.beta1, 0.9);
    EXPECT_DOUBLE_EQ(adam.beta2, 0.95);
    EXPECT_DOUBLE_EQ(adam.eps, 1e-10);
    EXPECT_DOUBLE_EQ(adam.weight_decay, 0);
    EXPECT_EQ(parsed.zero.stage, 0);
    EXPECT_TRUE(parsed.zero.reduce_scatter);
    EXPECT_FALSE(parsed.bf16);
  }
}

TEST(DeepSpeedConfig, LrSetsBothGroupsAndEachOverrideReplacesItInItsGroup) {
  auto both = parse_deepspeed_config(with_params({{"lr", 0.01}})).optimizer;
  EXPECT_DOUBLE_EQ(both.muon.lr, 0.01);
  EXPECT_DOUBLE_EQ(both.adam.lr, 0.01);
  auto muon_only = parse_deepspeed_config(with_params({{"lr", 0.01}, {"muon_lr", 0.05}})).optimizer;
  EXPECT_DOUBLE_EQ(muon_only.muon.lr, 0.05);
  EXPECT_DOUBLE_EQ(muon_only.adam.lr, 0.01);
  auto adam_only = parse_deepspeed_config(with_params({{"adam_lr", 1e-3}})).optimizer;
  EXPECT_DOUBLE_EQ(adam_only.muon.lr, 0.02);
  EXPECT_DOUBLE_EQ(adam_only.adam.lr, 1e-3);
}

TEST(DeepSpeedConfig, NsMethodSelectsTheIteration) {
  const auto standard = parse_deepspeed_config(with_params({{"ns_method", "standard"}})).optimizer.muon;
  EXPECT_EQ(standard.strategy, "standard");
  EXPECT_EQ(standard.precision, ScalarType::BF16);
  EXPECT_FALSE(standard.gram_restarts.has_value());
  const auto gram = parse_deepspeed_config(with_params({{"ns_method", "gram"}})).optimizer.muon;
  EXPECT_EQ(gram.strategy, "gram");
  EXPECT_EQ(gram.precision, ScalarType::F16);
  EXPECT_EQ(gram.gram_restarts, std::vector<int>{2});
  // Square matrices: the standard iteration on the same f16 values (original_muon.py), not bf16.
  EXPECT_TRUE(gram.square_uses_standard);
  EXPECT_FALSE(gram.square_precision.has_value());
  EXPECT_NE(error_of(with_params({{"ns_method", "svd"}})).find("optimizer.params.ns_method: \"svd\" is not a Newton-Schulz method; expected \"gram\" or \"standard\""),
            std::string::npos)
      << error_of(with_params({{"ns_method", "svd"}}));
}

TEST(DeepSpeedConfig, OrthojitExtras) {
  const auto s = parse_deepspeed_config(with_params({{"orthojit_preset", "moonlight"}, {"ns_steps", 6}, {"lr_adjust", "spectral"}, {"momentum_kind", "ema"},
                                                     {"backend", "ref"}, {"nesterov", false}, {"experts_as_batch", true}}))
                     .optimizer;
  EXPECT_EQ(s.preset, "moonlight");
  EXPECT_DOUBLE_EQ(s.muon.lr, 1e-3);  // the preset's, no lr given
  EXPECT_EQ(s.muon.ns_steps, 6);
  EXPECT_EQ(s.muon.lr_adjust, runtime::LrAdjust::Spectral);
  EXPECT_EQ(s.muon.momentum_kind, runtime::MomentumKind::Ema);
  EXPECT_EQ(s.muon.backend, "ref");
  EXPECT_FALSE(s.muon.nesterov);
  EXPECT_EQ(s.tensor_layout, runtime::MatrixLayout::Batch);
  const auto t = parse_deepspeed_config(with_params({{"tensor_layout", "trailing"}, {"conv_scale", "matrix"}, {"missing_grad", "skip"}, {"tagging", "moonlight"}}))
                     .optimizer;
  EXPECT_EQ(t.tensor_layout, runtime::MatrixLayout::Trailing);
  EXPECT_EQ(t.conv_scale, runtime::ConvScale::Matrix);
  EXPECT_EQ(t.missing_gradient, runtime::MissingGradient::Skip);
  EXPECT_EQ(t.tagging, runtime::TaggingRule::Moonlight);
  EXPECT_NE(error_of(with_params({{"missing_grad", "drop"}})).find("optimizer.params.missing_grad: \"drop\" is not one of skip, zero"), std::string::npos);
  EXPECT_NE(error_of(with_params({{"orthojit_preset", "sgd"}})).find("optimizer.params.orthojit_preset: unknown optimizer preset 'sgd'"), std::string::npos);
  EXPECT_NE(error_of(with_params({{"lr_adjust", "big"}})).find("optimizer.params.lr_adjust: \"big\" is not one of none, original"), std::string::npos);
  EXPECT_NE(error_of(with_params({{"backend", "tpu"}})).find("optimizer.params.backend: \"tpu\" is not one of auto, ref, cpu, cuda"), std::string::npos);
}

TEST(DeepSpeedConfig, ReadsZeroSettings) {
  const json config = json::parse(R"({
    "optimizer": {"type": "muon"},
    "zero_optimization": {
      "stage": 3, "reduce_scatter": false, "contiguous_gradients": false, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": 1000, "param_persistence_threshold": 10, "stage3_gather_16bit_weights_on_model_save": true,
      "sub_group_size": 0, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true, "buffer_count": 5},
      "offload_param": {"device": "cpu", "pin_memory": true}, "zero_quantized_gradients": false
    },
    "bf16": {"enabled": "auto"}, "fp16": {"enabled": false, "loss_scale": 0}, "train_batch_size": "auto"
  })");
  const DeepSpeedConfig parsed = parse_deepspeed_config(config);
  const runtime::ZeroSettings& zero = parsed.zero;
  EXPECT_EQ(zero.stage, 3);
  EXPECT_FALSE(zero.reduce_scatter);
  EXPECT_TRUE(zero.overlap_comm);  // DeepSpeed's default at stage 3
  EXPECT_FALSE(zero.contiguous_gradients);
  EXPECT_EQ(zero.reduce_bucket_size, 500000000);  // "auto": the default
  EXPECT_EQ(zero.stage3_prefetch_bucket_size, 1000);
  EXPECT_EQ(zero.stage3_param_persistence_threshold, 10);
  EXPECT_TRUE(zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(zero.offload_optimizer_device, "nvme");
  EXPECT_EQ(zero.offload_optimizer_nvme_path, "/local_nvme");
  EXPECT_TRUE(zero.offload_pin_memory);
  EXPECT_EQ(zero.offload_optimizer_buffer_count, 5);
  EXPECT_EQ(zero.offload_param_device, "cpu");
  EXPECT_TRUE(zero.offload_param_pin_memory);
  EXPECT_FALSE(parsed.bf16);
  EXPECT_EQ(parsed.auto_keys, (std::vector<std::string>{"zero_optimization.reduce_bucket_size", "bf16.enabled", "train_batch_size"}));

  // Stage 1/2 with offload is fine without reduce_scatter; DeepSpeed's older boolean too.
  const auto offloaded = parse_deepspeed_config(json{{"optimizer", {{"type", "muon"}}},
                                                     {"zero_optimization", {{"stage", 2}, {"reduce_scatter", false}, {"cpu_offload", true}}}});
  EXPECT_EQ(offloaded.zero.offload_optimizer_device, "cpu");
  EXPECT_FALSE(offloaded.zero.overlap_comm);
}

TEST(DeepSpeedConfig, ReproducesDeepSpeedsMuonCombinationErrors) {
  for (int stage : {1, 2}) {
    const json config = {{"optimizer", {{"type", "muon"}}},
                         {"zero_optimization", {{"stage", stage}, {"reduce_scatter", true}, {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}}}}};
    EXPECT_NE(error_of(config).find("Muon with reduce scatter does not support optimizer offload"), std::string::npos) << error_of(config);
    json defaults = config;  // reduce_scatter is true by default
    defaults["zero_optimization"].erase("reduce_scatter");
    EXPECT_NE(error_of(defaults).find("Muon with reduce scatter does not support optimizer offload"), std::string::npos) << error_of(defaults);
  }
  const json stage3 = {{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"stage", 3}}}};
  EXPECT_NE(error_of(stage3).find("Muon and reduce scatter cannot be used together"), std::string::npos) << error_of(stage3);
  json stage3_explicit = stage3;
  stage3_explicit["zero_optimization"]["reduce_scatter"] = true;
  EXPECT_NE(error_of(stage3_explicit).find("Muon and reduce scatter cannot be used together"), std::string::npos);
}

// DeepSpeed ignores keys it does not know, so a real config file with keys of other DeepSpeed
// versions or features must load: every unknown key is listed with its path and the valid keys,
// and the keys that are known still take effect.
TEST(DeepSpeedConfig, IgnoresUnknownKeysByDefaultAndListsEach) {
  const json config = {{"optimizer", {{"type", "muon"}, {"params", {{"lr", 0.01}, {"torch_adam", true}, {"adam_w_mode", true}}}, {"legacy_fusion", false}}},
                       {"zero_optimization", {{"stage", 2}, {"stgae", 2}, {"reduce_scatter", false}, {"offload_optimizer", {{"device", "cpu"}, {"pinned", true}}}}}};
  const DeepSpeedConfig parsed = parse_deepspeed_config(config);
  EXPECT_DOUBLE_EQ(parsed.optimizer.muon.lr, 0.01);
  EXPECT_EQ(parsed.zero.stage, 2);
  EXPECT_EQ(parsed.zero.offload_optimizer_device, "cpu");
  std::vector<std::string> paths;
  for (const auto& key : parsed.ignored_keys) paths.push_back(key.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"optimizer.legacy_fusion", "optimizer.params.adam_w_mode", "optimizer.params.torch_adam", "zero_optimization.stgae",
                                             "zero_optimization.offload_optimizer.pinned"}));
  const std::string warning = runtime::describe_ignored_keys(parsed);
  EXPECT_NE(warning.find("ignored unknown key optimizer.params.torch_adam"), std::string::npos) << warning;
  EXPECT_NE(warning.find("valid keys there: lr, momentum, weight_decay, muon_lr, adam_lr, ns_method"), std::string::npos) << warning;
  EXPECT_NE(error_of(config).find("unknown key \"legacy_fusion\""), std::string::npos);  // strict
  // A known key of the wrong type is still an error when lenient.
  EXPECT_THROW(parse_deepspeed_config(with_params({{"lr", "0.1"}, {"torch_adam", true}})), runtime::DeepSpeedConfigError);
}

TEST(DeepSpeedConfig, NamesUnknownKeysWrongTypesAndInvalidValues) {
  std::string error = error_of(with_params({{"learning_rate", 0.1}}));
  EXPECT_NE(error.find("unknown key \"learning_rate\" (at optimizer.params.learning_rate); valid keys: lr, momentum, weight_decay, muon_lr, adam_lr, ns_method"),
            std::string::npos)
      << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"stgae", 2}}}});
  EXPECT_NE(error.find("unknown key \"stgae\" (at zero_optimization.stgae); valid keys: stage, reduce_scatter"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}, {"parameters", json::object()}}}});
  EXPECT_NE(error.find("unknown key \"parameters\" (at optimizer.parameters); valid keys: type, params"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}, {"pinned", true}}}}}});
  EXPECT_NE(error.find("unknown key \"pinned\" (at zero_optimization.offload_optimizer.pinned)"), std::string::npos) << error;

  error = error_of(with_params({{"lr", "0.1"}}));
  EXPECT_NE(error.find("optimizer.params.lr: expected a number, found string \"0.1\""), std::string::npos) << error;
  error = error_of(with_params({{"nesterov", 1}}));
  EXPECT_NE(error.find("optimizer.params.nesterov: expected true or false, found number 1"), std::string::npos) << error;
  error = error_of(with_params({{"betas", json::array({0.9})}}));
  EXPECT_NE(error.find("optimizer.params.betas: expected an array of 2 numbers [beta1, beta2], found array [0.9]"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"stage", "2"}}}});
  EXPECT_NE(error.find("zero_optimization.stage: expected an integer, found string \"2\""), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"reduce_bucket_size", 2.5}}}});
  EXPECT_NE(error.find("zero_optimization.reduce_bucket_size: expected an integer, found number 2.5"), std::string::npos) << error;
  error = error_of(with_params({{"lr", "auto"}}));
  EXPECT_NE(error.find("optimizer.params.lr: \"auto\" is a Hugging Face Trainer placeholder"), std::string::npos) << error;

  error = error_of({{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}}});
  EXPECT_NE(error.find("optimizer.type: \"AdamW\" is not supported; orthojit runs Muon"), std::string::npos) << error;
  EXPECT_NE(error_of(json{{"zero_optimization", {{"stage", 2}}}}).find("has no \"optimizer\" section"), std::string::npos);

  EXPECT_NE(error_of(with_params({{"lr", -0.1}})).find("optimizer.params.lr must be >= 0, found -0.1"), std::string::npos);
  EXPECT_NE(error_of(with_params({{"muon_lr", -1}})).find("optimizer.params.muon_lr must be >= 0"), std::string::npos);
  EXPECT_NE(error_of(with_params({{"momentum", 1.0}})).find("optimizer.params.momentum must be in [0, 1), found 1.0"), std::string::npos)
      << error_of(with_params({{"momentum", 1.0}}));
  EXPECT_NE(error_of(with_params({{"momentum", -0.5}})).find("optimizer.params.momentum must be in [0, 1)"), std::string::npos);
  EXPECT_NE(error_of(with_params({{"betas", json::array({0.9, 1.0})}})).find("optimizer.params.betas: beta2 must be in [0, 1), found 1.0"), std::string::npos);
  EXPECT_NE(error_of(with_params({{"eps", 0}})).find("optimizer.params.eps must be > 0, found 0"), std::string::npos);
  EXPECT_NE(error_of(with_params({{"weight_decay", -1}})).find("optimizer.params.weight_decay must be >= 0"), std::string::npos);
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"stage", 4}}}});
  EXPECT_NE(error.find("zero_optimization.stage must be 0, 1, 2 or 3, found 4"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"stage", 2}, {"reduce_scatter", false}, {"offload_optimizer", {{"device", "disk"}}}}}});
  EXPECT_NE(error.find("zero_optimization.offload_optimizer.device: \"disk\" is not one of none, cpu, nvme"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"stage", 2}, {"offload_param", {{"device", "cpu"}}}}}});
  EXPECT_NE(error.find("parameter offload needs ZeRO stage 3"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"zero_optimization", {{"stage", 2}, {"zero_quantized_gradients", true}}}});
  EXPECT_NE(error.find("zero_optimization.zero_quantized_gradients = true is not supported"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"bf16", {{"enabled", true}}}, {"fp16", {{"enabled", true}}}});
  EXPECT_NE(error.find("bf16 and fp16 modes cannot be simultaneously enabled"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"train_batch_size", 30}, {"train_micro_batch_size_per_gpu", 4}});
  EXPECT_NE(error.find("train_batch_size 30 is not train_micro_batch_size_per_gpu (4)"), std::string::npos) << error;
  error = error_of({{"optimizer", {{"type", "muon"}}}, {"gradient_clipping", "1.0"}});
  EXPECT_NE(error.find("gradient_clipping: expected a number, found string \"1.0\""), std::string::npos) << error;
}

TEST(DeepSpeedConfig, LoadsAFileAndNamesItInErrors) {
  const std::string path = ::testing::TempDir() + "orthojit_ds_config.json";
  std::ofstream(path) << R"({"optimizer": {"type": "muon", "params": {"lr": 0.03, "ns_method": "standard"}}, "zero_optimization": {"stage": 1}})";
  const DeepSpeedConfig parsed = runtime::load_deepspeed_config(path);
  EXPECT_DOUBLE_EQ(parsed.optimizer.muon.lr, 0.03);
  EXPECT_EQ(parsed.zero.stage, 1);
  std::ofstream(path) << R"({"optimizer": {"type": "muon", "params": {"lr": 0.03,}})";
  try {
    runtime::load_deepspeed_config(path);
    ADD_FAILURE() << "bad JSON accepted";
  } catch (const runtime::DeepSpeedConfigError& error) {
    EXPECT_NE(std::string(error.what()).find(path + ": not valid JSON"), std::string::npos) << error.what();
  }
  std::ofstream(path) << R"({"optimizer": {"type": "muon", "params": {"lr": -1}}})";
  try {
    runtime::load_deepspeed_config(path);
    ADD_FAILURE() << "negative lr accepted";
  } catch (const runtime::DeepSpeedConfigError& error) {
    EXPECT_NE(std::string(error.what()).find(path + ": optimizer.params.lr must be >= 0"), std::string::npos) << error.what();
  }
  std::remove(path.c_str());
  EXPECT_THROW(runtime::load_deepspeed_config(path), runtime::DeepSpeedConfigError);
}

}  // namespace
}  // namespace orthojit
