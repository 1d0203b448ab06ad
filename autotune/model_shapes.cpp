// Model configuration -> matrices.
#include "autotune/model_shapes.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <stdexcept>

namespace orthojit::autotune {
namespace {

constexpr int64_t kLargestField = int64_t{1} << 24;
// At most 2^48 parameters in one matrix group (rows x cols x batch x count), so that sums over a
// model's groups stay far inside int64.
constexpr int64_t kLargestGroup = int64_t{1} << 48;

int64_t required(const nlohmann::json& config, const char* key) {
  if (!config.contains(key) || config.at(key).is_null())
    throw std::invalid_argument(std::string("the model configuration has no \"") + key + "\" (needed for its layout)");
  if (!config.at(key).is_number_integer() || config.at(key).get<int64_t>() <= 0)
    throw std::invalid_argument(std::string("\"") + key + "\" must be a positive integer, got " + config.at(key).dump());
  // Far above any model's (vocabularies of 10^6, widths of 10^5), and small enough that the
  // layout's products of two fields cannot overflow (fuzz_model_config found 5.6e15 x 2048).
  if (config.at(key).get<int64_t>() > kLargestField)
    throw std::invalid_argument(std::string("\"") + key + "\" is " + config.at(key).dump() + ", beyond any model's (at most " + std::to_string(kLargestField) + ")");
  return config.at(key).get<int64_t>();
}

int64_t optional_int(const nlohmann::json& config, const char* key, int64_t fallback) {
  if (!config.contains(key) || config.at(key).is_null()) return fallback;
  return required(config, key);
}

bool has(const nlohmann::json& config, const char* key) { return config.contains(key) && !config.at(key).is_null(); }

// A boolean field: absent or null is `fallback`; anything but true or false is refused by name
// ("true" as a string or 1 used to escape as nlohmann's type_error, an internal error).
bool optional_bool(const nlohmann::json& config, const char* key, bool fallback) {
  if (!has(config, key)) return fallback;
  if (!config.at(key).is_boolean()) throw std::invalid_argument(std::string("\"") + key + "\" must be true or false, got " + config.at(key).dump());
  return config.at(key).get<bool>();
}

}  // namespace

int64_t ModelShapes::parameters(bool muon) const {
  int64_t total = 0;
  for (const auto& matrix : matrices)
    if (matrix.muon == muon) total += matrix.rows * matrix.cols * matrix.batch * matrix.count;
  return total;
}

ModelShapes derive_model_matrices(const nlohmann::json& config, const ModelShapeOptions& options) {
  if (!config.is_object()) throw std::invalid_argument("the model configuration is not a JSON object");
  ModelShapes shapes;
  // A non-string model_type used to escape as nlohmann's type_error (tests/fuzz/fuzz_model_config.cpp).
  if (has(config, "model_type") && !config.at("model_type").is_string())
    throw std::invalid_argument("\"model_type\" must be a string such as \"llama\", got " + config.at("model_type").dump());
  shapes.model_type = has(config, "model_type") ? config.at("model_type").get<std::string>() : std::string("unknown");
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, int64_t count, int64_t batch = 1, bool muon = true) {
    if (count <= 0) return;
    // Every size comes from positive fields, but through differences and quotients (hidden /
    // heads, kv_lora_rank + rope...): a combination of the fields that leaves none says so.
    if (rows < 1 || cols < 1 || batch < 1)
      throw std::invalid_argument("the configuration makes " + name + " " + std::to_string(rows) + "x" + std::to_string(cols) + " (batch " +
                                  std::to_string(batch) + "): its fields leave a matrix without rows or columns");
    int64_t elements = 0;
    if (__builtin_mul_overflow(rows, cols, &elements) || __builtin_mul_overflow(elements, batch, &elements) ||
        __builtin_mul_overflow(elements, count, &elements) || elements > kLargestGroup)
      throw std::invalid_argument("the configuration makes " + name + " " + std::to_string(rows) + "x" + std::to_string(cols) + " (batch " +
                                  std::to_string(batch) + ", " + std::to_string(count) + " of them): more than 2^48 parameters, no model has that");
    shapes.matrices.push_back({name, rows, cols, batch, count, muon});
  };

  if (shapes.model_type == "gpt2" || has(config, "n_embd")) {
    const int64_t hidden = required(config, "n_embd"), layers = required(config, "n_layer"), heads = required(config, "n_head");
    const int64_t inner = optional_int(config, "n_inner", 4 * hidden), vocab = required(config, "vocab_size");
    const int64_t positions = optional_int(config, "n_positions", 1024);
    if (hidden % heads != 0) throw std::invalid_argument("n_embd must be a multiple of n_head");
    add("wte (token embedding, tied with lm_head)", vocab, hidden, 1, 1, false);
    add("wpe (position embedding)", positions, hidden, 1, 1, false);
    // Conv1D stores (in, out).
    if (options.per_head) add("h.*.attn.c_attn (q, k, v per head)", hidden, hidden / heads, layers, 3 * heads);
    else add("h.*.attn.c_attn (fused qkv)", hidden, 3 * hidden, layers);
    add("h.*.attn.c_proj", hidden, hidden, layers);
    add("h.*.mlp.c_fc", hidden, inner, layers);
    add("h.*.mlp.c_proj", inner, hidden, layers);
    return shapes;
  }

  const int64_t hidden = required(config, "hidden_size"), layers = required(config, "num_hidden_layers");
  const int64_t heads = required(config, "num_attention_heads"), vocab = required(config, "vocab_size");
  const int64_t kv_heads = optional_int(config, "num_key_value_heads", heads);
  // Without head_dim the heads split hidden_size evenly, as Hugging Face's attention modules
  // require (fuzz_model_config found hidden_size 2 with 4 heads: heads of 0 rows).
  if (!has(config, "head_dim") && hidden % heads != 0)
    throw std::invalid_argument("\"hidden_size\" (" + std::to_string(hidden) + ") must be a multiple of \"num_attention_heads\" (" + std::to_string(heads) +
                                ") when \"head_dim\" is not given");
  const int64_t head_dim = optional_int(config, "head_dim", hidden / heads);
  const bool tied = optional_bool(config, "tie_word_embeddings", false);
  add(tied ? "embed_tokens (tied with lm_head)" : "embed_tokens", vocab, hidden, 1, 1, false);
  if (!tied) add("lm_head", vocab, hidden, 1, 1, false);

  // Attention.
  if (has(config, "kv_lora_rank")) {  // MLA
    const int64_t kv_rank = required(config, "kv_lora_rank"), nope = required(config, "qk_nope_head_dim");
    const int64_t rope = required(config, "qk_rope_head_dim"), v_dim = required(config, "v_head_dim");
    if (has(config, "q_lora_rank")) {
      const int64_t q_rank = required(config, "q_lora_rank");
      add("layers.*.self_attn.q_a_proj", q_rank, hidden, layers);
      if (options.per_head) add("layers.*.self_attn.q_b_proj (per head)", nope + rope, q_rank, layers, heads);
      else add("layers.*.self_attn.q_b_proj", heads * (nope + rope), q_rank, layers);
    } else if (options.per_head) {
      add("layers.*.self_attn.q_proj (per head)", nope + rope, hidden, layers, heads);
    } else {
      add("layers.*.self_attn.q_proj", heads * (nope + rope), hidden, layers);
    }
    add("layers.*.self_attn.kv_a_proj_with_mqa", kv_rank + rope, hidden, layers);
    if (options.per_head) add("layers.*.self_attn.kv_b_proj (per head)", nope + v_dim, kv_rank, layers, heads);
    else add("layers.*.self_attn.kv_b_proj", heads * (nope + v_dim), kv_rank, layers);
    add("layers.*.self_attn.o_proj", hidden, heads * v_dim, layers);
  } else if (options.per_head) {
    add("layers.*.self_attn.q_proj (per head)", head_dim, hidden, layers, heads);
    add("layers.*.self_attn.k_proj (per head)", head_dim, hidden, layers, kv_heads);
    add("layers.*.self_attn.v_proj (per head)", head_dim, hidden, layers, kv_heads);
    add("layers.*.self_attn.o_proj", hidden, heads * head_dim, layers);
  } else {
    add("layers.*.self_attn.q_proj", heads * head_dim, hidden, layers);
    add("layers.*.self_attn.k_proj", kv_heads * head_dim, hidden, layers);
    add("layers.*.self_attn.v_proj", kv_heads * head_dim, hidden, layers);
    add("layers.*.self_attn.o_proj", hidden, heads * head_dim, layers);
  }

  // MLP: dense layers and, for a mixture of experts, expert layers.
  int64_t experts = 0;
  for (const char* key : {"n_routed_experts", "num_experts", "num_local_experts"})
    if (has(config, key)) experts = required(config, key);
  const int64_t intermediate = has(config, "intermediate_size") ? required(config, "intermediate_size") : 0;
  if (experts == 0) {
    if (intermediate == 0) throw std::invalid_argument("the model configuration has no \"intermediate_size\" (needed for its layout)");
    add("layers.*.mlp.gate_proj", intermediate, hidden, layers);
    add("layers.*.mlp.up_proj", intermediate, hidden, layers);
    add("layers.*.mlp.down_proj", hidden, intermediate, layers);
    return shapes;
  }
  const bool mixtral = !has(config, "moe_intermediate_size");
  const int64_t expert_size = mixtral ? intermediate : required(config, "moe_intermediate_size");
  if (expert_size == 0) throw std::invalid_argument("a mixture of experts needs \"moe_intermediate_size\" (or \"intermediate_size\" for Mixtral)");
  // Which layers are expert layers: DeepSeek's first_k_dense_replace / moe_layer_freq, Qwen's
  // decoder_sparse_step (and mlp_only_layers), else all.
  const int64_t first_dense = optional_int(config, "first_k_dense_replace", 0);
  const int64_t frequency = std::max(optional_int(config, "moe_layer_freq", 1), optional_int(config, "decoder_sparse_step", 1));
  std::vector<int64_t> dense_only;
  if (config.contains("mlp_only_layers") && config.at("mlp_only_layers").is_array()) {
    for (const nlohmann::json& layer : config.at("mlp_only_layers"))
      if (!layer.is_number_integer())
        throw std::invalid_argument("\"mlp_only_layers\" must list layer indices (integers), found " + layer.dump());
    dense_only = config.at("mlp_only_layers").get<std::vector<int64_t>>();
  }
  int64_t expert_layers = 0;
  for (int64_t layer = 0; layer < layers; ++layer) {
    const bool sparse = layer >= first_dense && (layer - first_dense) % frequency == 0 &&
                        std::find(dense_only.begin(), dense_only.end(), layer) == dense_only.end();
    expert_layers += sparse ? 1 : 0;
  }
  const int64_t dense_layers = layers - expert_layers;
  if (dense_layers > 0) {
    if (intermediate == 0) throw std::invalid_argument("dense layers of this model need \"intermediate_size\"");
    add("layers.*.mlp.gate_proj (dense layers)", intermediate, hidden, dense_layers);
    add("layers.*.mlp.up_proj (dense layers)", intermediate, hidden, dense_layers);
    add("layers.*.mlp.down_proj (dense layers)", hidden, intermediate, dense_layers);
  }
  add("layers.*.mlp.gate (router)", experts, hidden, expert_layers);
  add("layers.*.mlp.experts.gate_proj", expert_size, hidden, expert_layers, experts);
  add("layers.*.mlp.experts.up_proj", expert_size, hidden, expert_layers, experts);
  add("layers.*.mlp.experts.down_proj", hidden, expert_size, expert_layers, experts);
  int64_t shared = 0;
  if (has(config, "n_shared_experts")) shared = required(config, "n_shared_experts") * expert_size;  // DeepSeek: one MLP of n·size
  if (has(config, "shared_expert_intermediate_size")) shared = required(config, "shared_expert_intermediate_size");  // Qwen-MoE
  if (shared > 0) {
    add("layers.*.mlp.shared_experts.gate_proj", shared, hidden, expert_layers);
    add("layers.*.mlp.shared_experts.up_proj", shared, hidden, expert_layers);
    add("layers.*.mlp.shared_experts.down_proj", hidden, shared, expert_layers);
  }
  return shapes;
}

std::vector<UniqueShape> unique_muon_shapes(const ModelShapes& shapes) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, UniqueShape> unique;
  for (const auto& matrix : shapes.matrices) {
    if (!matrix.muon) continue;
    const int64_t rows = std::min(matrix.rows, matrix.cols), cols = std::max(matrix.rows, matrix.cols);
    UniqueShape& shape = unique[{rows, cols, matrix.batch}];
    shape.rows = rows;
    shape.cols = cols;
    shape.batch = matrix.batch;
    shape.count += matrix.count;
    shape.names.push_back(matrix.name);
  }
  std::vector<UniqueShape> result;
  for (auto& [key, shape] : unique) result.push_back(shape);
  // Largest work first: the slowest shape's time shows early, so the progress bar's estimate for
  // the rest only improves.
  std::sort(result.begin(), result.end(), [](const UniqueShape& a, const UniqueShape& b) {
    const double work_a = static_cast<double>(a.rows) * static_cast<double>(a.rows) * static_cast<double>(a.cols) * static_cast<double>(a.batch);
    const double work_b = static_cast<double>(b.rows) * static_cast<double>(b.rows) * static_cast<double>(b.cols) * static_cast<double>(b.batch);
    return work_a != work_b ? work_a > work_b : std::tie(a.rows, a.cols, a.batch) < std::tie(b.rows, b.cols, b.batch);
  });
  return result;
}

}  // namespace orthojit::autotune
