// Optimizer-state memory of a model under AdamW alone and under hybrid Muon + AdamW, from its
// Hugging Face config.json (`orthojit memory`).
//
// State is f32: AdamW keeps m and v (8 bytes per parameter), Muon one momentum buffer (4 bytes).
// Muon takes the hidden matrices (autotune::derive_model_matrices, DeepSpeed's tagging rule);
// AdamW the embeddings, lm_head and the 1-D parameters (norms, biases), which model_shapes does
// not list and which are computed here from the config (count_one_dimensional_parameters).
// Tied embeddings (GPT-2 by default, or "tie_word_embeddings": true) are one tensor, counted once.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autotune/model_shapes.h"
#include "runtime/muon/hybrid_optimizer.h"

namespace orthojit::runtime {

inline constexpr int64_t kAdamStateBytesPerParameter = 8;  // exp_avg, exp_avg_sq (f32)
inline constexpr int64_t kMuonStateBytesPerParameter = 4;  // momentum_buffer (f32)

struct OneDimensionalParameters {
  int64_t count = 0;
  std::vector<std::string> sources;  // how they were counted, e.g. "RMSNorm weights: 2 per layer + final (65 x 4096)"
};

// Norm weights (and LayerNorm biases), linear biases and other 1-D tensors of the supported
// layouts (autotune/model_shapes.h): Llama/Mistral/Mixtral RMSNorm (2 per layer + final),
// attention_bias / mlp_bias, Qwen2's q/k/v biases, Qwen3's q/k norms, MLA's q_a/kv_a norms,
// DeepSeek-V3's router correction bias, GPT-2's LayerNorms and Conv1D biases. `shapes` is the
// model's matrices (for the expert-layer count). Throws std::invalid_argument like
// derive_model_matrices.
OneDimensionalParameters count_one_dimensional_parameters(const nlohmann::json& config, const autotune::ModelShapes& shapes);

struct MemoryOptions {
  std::optional<bool> tied_embeddings;  // unset: the config's (tie_word_embeddings; GPT-2 ties by default)
  bool per_head = false;                // list q/k/v per head (the counts do not change)
};

struct MemoryReport {
  std::string model_type;
  bool tied_embeddings = false;
  autotune::ModelShapes shapes;        // the matrices (Muon and AdamW), lm_head added when untied GPT-2
  OneDimensionalParameters one_dimensional;
  int64_t muon_parameters = 0;         // hidden matrices
  int64_t adam_matrix_parameters = 0;  // embeddings, lm_head
  int64_t total_parameters() const { return muon_parameters + adam_matrix_parameters + one_dimensional.count; }
  StateBytes adamw_only() const;       // every parameter in AdamW
  StateBytes hybrid() const;           // Muon for the hidden matrices, AdamW for the rest
  double reduction() const;            // 1 − hybrid / adamw_only (0.45 = 45% less)
  double muon_share() const;           // muon_parameters / total
};

// Throws std::invalid_argument naming the missing or invalid key.
MemoryReport account_memory(const nlohmann::json& config, const MemoryOptions& options = {});

nlohmann::json to_json(const MemoryReport& report);
// The table `orthojit memory` prints.
std::string format_memory_report(const MemoryReport& report);

}  // namespace orthojit::runtime
