// The matrices Muon would orthogonalize in a Hugging Face model, from its config.json.
//
// Supported layouts (the keys each reads are named in errors when missing):
//   * dense decoders in the Llama / Qwen / Mistral style: hidden_size, intermediate_size,
//     num_attention_heads, num_key_value_heads, head_dim, num_hidden_layers, vocab_size;
//   * GPT-2: n_embd, n_layer, n_head, n_inner (fused c_attn qkv; Conv1D weights stored (in, out));
//   * mixture of experts: n_routed_experts | num_experts | num_local_experts with
//     moe_intermediate_size (or intermediate_size for Mixtral), shared experts
//     (n_shared_experts, shared_expert_intermediate_size), first_k_dense_replace, moe_layer_freq,
//     decoder_sparse_step: the experts of one layer are one batch of matrices;
//   * MLA attention (DeepSeek-V2/V3, Moonlight): q_lora_rank (null: a plain q_proj), kv_lora_rank,
//     qk_nope_head_dim, qk_rope_head_dim, v_head_dim.
// Embeddings and lm_head are listed with role AdamW (as DeepSpeed, Moonlight and Keller Jordan's
// Muon do), as are 1-D parameters (norms, biases), which are not listed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace orthojit::autotune {

struct ModelMatrix {
  std::string name;          // e.g. "layers.*.self_attn.q_proj"
  int64_t rows = 0, cols = 0;  // as stored: (out, in) for nn.Linear
  int64_t batch = 1;         // > 1: the experts of a layer, orthogonalized in one call
  int64_t count = 0;         // how many such (batches of) matrices the model has
  bool muon = true;          // false: AdamW (embeddings, lm_head)
};

struct ModelShapeOptions {
  bool per_head = false;  // split q/k/v (and o) into per-head blocks ("Muon split")
};

struct ModelShapes {
  std::string model_type;  // "llama", "gpt2", "deepseek_v2", ...
  std::vector<ModelMatrix> matrices;
  int64_t parameters(bool muon) const;  // parameters handled by Muon (true) or by AdamW (false)
};

// Throws std::invalid_argument naming the missing or invalid key.
ModelShapes derive_model_matrices(const nlohmann::json& config, const ModelShapeOptions& options = {});

// A distinct problem to tune: the oriented shape (rows <= cols; run(Xᵀ) = run(X)ᵀ, one kernel for
// both), its batch, and how many orthogonalizations per step use it.
struct UniqueShape {
  int64_t rows = 0, cols = 0, batch = 1;
  int64_t count = 0;
  std::vector<std::string> names;
};
std::vector<UniqueShape> unique_muon_shapes(const ModelShapes& shapes);

}  // namespace orthojit::autotune
