// Optimizer-state accounting: AdamW alone vs hybrid Muon + AdamW.
#include "runtime/muon/memory_accounting.h"

#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace orthojit::runtime {
namespace {

bool has(const nlohmann::json& config, const char* key) { return config.contains(key) && !config.at(key).is_null(); }

int64_t positive(const nlohmann::json& config, const char* key) {
  if (!has(config, key)) throw std::invalid_argument(std::string("the model configuration has no \"") + key + "\" (needed for its layout)");
  if (!config.at(key).is_number_integer() || config.at(key).get<int64_t>() <= 0)
    throw std::invalid_argument(std::string("\"") + key + "\" must be a positive integer, got " + config.at(key).dump());
  return config.at(key).get<int64_t>();
}

int64_t optional_positive(const nlohmann::json& config, const char* key, int64_t fallback) { return has(config, key) ? positive(config, key) : fallback; }

bool flag(const nlohmann::json& config, const char* key) { return has(config, key) && config.at(key).is_boolean() && config.at(key).get<bool>(); }

bool is_gpt2(const nlohmann::json& config) { return config.value("model_type", std::string()) == "gpt2" || has(config, "n_embd"); }

// How many layers have a matrix whose name starts with `prefix` (its count).
int64_t layers_with(const autotune::ModelShapes& shapes, const std::string& prefix) {
  int64_t count = 0;
  for (const auto& matrix : shapes.matrices)
    if (matrix.name.rfind(prefix, 0) == 0) count += matrix.count;
  return count;
}

std::string grouped(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value), text;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text.push_back(',');
    text.push_back(digits[i]);
  }
  return value < 0 ? "-" + text : text;
}

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

}  // namespace

OneDimensionalParameters count_one_dimensional_parameters(const nlohmann::json& config, const autotune::ModelShapes& shapes) {
  OneDimensionalParameters result;
  auto add = [&](int64_t count, const std::string& source) {
    if (count <= 0) return;
    result.count += count;
    result.sources.push_back(source + ": " + grouped(count));
  };

  if (is_gpt2(config)) {
    const int64_t hidden = positive(config, "n_embd"), layers = positive(config, "n_layer");
    const int64_t inner = optional_positive(config, "n_inner", 4 * hidden);
    add(layers * 2 * 2 * hidden + 2 * hidden, "LayerNorm weights and biases (ln_1, ln_2 per layer + ln_f)");
    add(layers * (3 * hidden + hidden + inner + hidden), "Conv1D biases (c_attn, attn.c_proj, c_fc, mlp.c_proj per layer)");
    return result;
  }

  const std::string type = config.value("model_type", std::string());
  const int64_t hidden = positive(config, "hidden_size"), layers = positive(config, "num_hidden_layers");
  const int64_t heads = positive(config, "num_attention_heads");
  const int64_t kv_heads = optional_positive(config, "num_key_value_heads", heads);
  const int64_t head_dim = optional_positive(config, "head_dim", hidden / heads);
  add(layers * 2 * hidden + hidden, "RMSNorm weights (input and post-attention per layer + final norm)");

  const bool mla = has(config, "kv_lora_rank");
  if (mla) {
    const int64_t kv_rank = positive(config, "kv_lora_rank");
    add(layers * kv_rank, "MLA kv_a_layernorm weights (per layer)");
    if (has(config, "q_lora_rank")) add(layers * positive(config, "q_lora_rank"), "MLA q_a_layernorm weights (per layer)");
    if (flag(config, "attention_bias")) {
      const int64_t q_a = has(config, "q_lora_rank") ? positive(config, "q_lora_rank") : 0;
      add(layers * (q_a + kv_rank + positive(config, "qk_rope_head_dim") + hidden), "attention biases (q_a_proj, kv_a_proj_with_mqa, o_proj; attention_bias)");
    }
  } else if (flag(config, "attention_bias")) {
    add(layers * (heads * head_dim + 2 * kv_heads * head_dim + hidden), "attention biases (q, k, v, o per layer; attention_bias)");
  } else if (type == "qwen2" || type == "qwen2_moe") {
    add(layers * (heads * head_dim + 2 * kv_heads * head_dim), "q, k, v biases (Qwen2, per layer)");
  }
  if (type == "qwen3" || type == "qwen3_moe") add(layers * 2 * head_dim, "q_norm and k_norm weights (Qwen3, per layer)");
  if (flag(config, "mlp_bias") && has(config, "intermediate_size")) {
    const int64_t dense_layers = layers_with(shapes, "layers.*.mlp.gate_proj");
    add(dense_layers * (2 * positive(config, "intermediate_size") + hidden), "dense MLP biases (gate, up, down; mlp_bias)");
  }
  if (config.value("topk_method", std::string()) == "noaux_tc" && has(config, "n_routed_experts"))
    add(layers_with(shapes, "layers.*.mlp.gate (router)") * positive(config, "n_routed_experts"), "router e_score_correction_bias (per expert layer)");
  return result;
}

StateBytes MemoryReport::adamw_only() const {
  StateBytes bytes;
  bytes.adam = kAdamStateBytesPerParameter * total_parameters();
  return bytes;
}

StateBytes MemoryReport::hybrid() const {
  StateBytes bytes;
  bytes.muon = kMuonStateBytesPerParameter * muon_parameters;
  bytes.adam = kAdamStateBytesPerParameter * (adam_matrix_parameters + one_dimensional.count);
  return bytes;
}

double MemoryReport::reduction() const {
  const int64_t before = adamw_only().total();
  return before == 0 ? 0.0 : 1.0 - static_cast<double>(hybrid().total()) / static_cast<double>(before);
}

double MemoryReport::muon_share() const {
  const int64_t total = total_parameters();
  return total == 0 ? 0.0 : static_cast<double>(muon_parameters) / static_cast<double>(total);
}

MemoryReport account_memory(const nlohmann::json& config_in, const MemoryOptions& options) {
  if (!config_in.is_object()) throw std::invalid_argument("the model configuration is not a JSON object");
  nlohmann::json config = config_in;
  const bool gpt2 = is_gpt2(config);
  MemoryReport report;
  // Hugging Face: GPT2Config keeps PretrainedConfig's tie_word_embeddings = True; the Llama-style
  // configs default to False (as model_shapes reads them).
  if (has(config, "tie_word_embeddings") && !config.at("tie_word_embeddings").is_boolean())  // "yes" was read as untied
    throw std::invalid_argument("\"tie_word_embeddings\" must be true or false, got " + config.at("tie_word_embeddings").dump());
  const bool config_ties = has(config, "tie_word_embeddings") ? config.at("tie_word_embeddings").get<bool>() : gpt2;
  report.tied_embeddings = options.tied_embeddings.value_or(config_ties);
  if (!gpt2) config["tie_word_embeddings"] = report.tied_embeddings;

  autotune::ModelShapeOptions shape_options;
  shape_options.per_head = options.per_head;
  report.shapes = autotune::derive_model_matrices(config, shape_options);
  report.model_type = report.shapes.model_type;
  if (gpt2 && !report.tied_embeddings) {
    // model_shapes lists GPT-2's wte as tied; an untied lm_head is a second (vocab, n_embd) matrix.
    for (auto& matrix : report.shapes.matrices)
      if (matrix.name.rfind("wte", 0) == 0) matrix.name = "wte (token embedding)";
    report.shapes.matrices.insert(report.shapes.matrices.begin() + 1,
                                  autotune::ModelMatrix{"lm_head", positive(config, "vocab_size"), positive(config, "n_embd"), 1, 1, false});
  }
  report.muon_parameters = report.shapes.parameters(true);
  report.adam_matrix_parameters = report.shapes.parameters(false);
  report.one_dimensional = count_one_dimensional_parameters(config, report.shapes);
  return report;
}

nlohmann::json to_json(const MemoryReport& report) {
  nlohmann::json matrices = nlohmann::json::array();
  for (const auto& matrix : report.shapes.matrices)
    matrices.push_back({{"name", matrix.name},
                        {"rows", matrix.rows},
                        {"cols", matrix.cols},
                        {"batch", matrix.batch},
                        {"count", matrix.count},
                        {"parameters", matrix.rows * matrix.cols * matrix.batch * matrix.count},
                        {"group", matrix.muon ? "muon" : "adamw"}});
  auto bytes = [](const StateBytes& state) { return nlohmann::json{{"muon", state.muon}, {"adamw", state.adam}, {"total", state.total()}}; };
  return {{"model_type", report.model_type},
          {"tied_embeddings", report.tied_embeddings},
          {"parameters",
           {{"muon_matrices", report.muon_parameters},
            {"adamw_matrices", report.adam_matrix_parameters},
            {"one_dimensional", report.one_dimensional.count},
            {"total", report.total_parameters()}}},
          {"one_dimensional_sources", report.one_dimensional.sources},
          {"matrices", matrices},
          {"state_bytes_per_parameter", {{"adamw", kAdamStateBytesPerParameter}, {"muon", kMuonStateBytesPerParameter}}},
          {"optimizer_state_bytes", {{"adamw_only", bytes(report.adamw_only())}, {"hybrid", bytes(report.hybrid())}}},
          {"reduction_percent", 100 * report.reduction()},
          {"muon_share_percent", 100 * report.muon_share()}};
}

std::string format_memory_report(const MemoryReport& report) {
  std::ostringstream out;
  const double total = static_cast<double>(report.total_parameters());
  auto share = [&](int64_t count) { return total > 0 ? percent(static_cast<double>(count) / total) : std::string("-"); };
  char line[256];
  out << "model: " << report.model_type << ", " << grouped(report.total_parameters()) << " parameters; embeddings "
      << (report.tied_embeddings ? "tied (lm_head is the token embedding, counted once)" : "untied (lm_head is its own matrix)") << "\n\n";

  std::snprintf(line, sizeof line, "%-44s %16s %8s  %s\n", "parameters by role", "parameters", "share", "optimizer");
  out << line;
  auto role = [&](const char* name, int64_t count, const char* optimizer) {
    std::snprintf(line, sizeof line, "%-44s %16s %8s  %s\n", name, grouped(count).c_str(), share(count).c_str(), optimizer);
    out << line;
  };
  auto matrices = [&](bool muon) {
    for (const auto& matrix : report.shapes.matrices) {
      if (matrix.muon != muon) continue;
      std::string shape = std::to_string(matrix.rows) + "x" + std::to_string(matrix.cols);
      if (matrix.batch > 1) shape += " x" + std::to_string(matrix.batch);
      std::snprintf(line, sizeof line, "    %-40.40s %16s   %s, %s\n", matrix.name.c_str(), grouped(matrix.rows * matrix.cols * matrix.batch * matrix.count).c_str(),
                    shape.c_str(), (std::to_string(matrix.count) + (matrix.count == 1 ? " tensor" : " tensors")).c_str());
      out << line;
    }
  };
  role("  Muon: hidden matrices", report.muon_parameters, "Muon (4 B/param: momentum)");
  matrices(true);
  role("  AdamW: matrices (embeddings, lm_head)", report.adam_matrix_parameters, "AdamW (8 B/param: m, v)");
  matrices(false);
  role("  AdamW: 1-D (norms, biases)", report.one_dimensional.count, "AdamW (8 B/param: m, v)");
  for (const auto& source : report.one_dimensional.sources) out << "    " << source << "\n";
  role("  total", report.total_parameters(), "");

  const StateBytes before = report.adamw_only(), after = report.hybrid();
  out << "\n";
  std::snprintf(line, sizeof line, "%-30s %26s %26s\n", "optimizer state (f32)", "AdamW only", "Muon + AdamW");
  out << line;
  auto row = [&](const char* name, int64_t a, int64_t b) {
    std::snprintf(line, sizeof line, "%-30s %16s %9s %16s %9s\n", name, grouped(a).c_str(), human_bytes(a).c_str(), grouped(b).c_str(), human_bytes(b).c_str());
    out << line;
  };
  row("  Muon group (bytes)", before.muon, after.muon);
  row("  AdamW group (bytes)", before.adam, after.adam);
  row("  total (bytes)", before.total(), after.total());
  out << "\nMuon + AdamW keeps " << percent(report.reduction()) << " less optimizer state than AdamW alone; Muon handles "
      << percent(report.muon_share()) << " of the parameters.\n"
      << "(Per data-parallel rank under ZeRO stage 1-3 the state is divided by the number of ranks. 1-D parameters are computed from the\n"
      << "config, as listed above: model_shapes lists only matrices.)\n";
  return out.str();
}

}  // namespace orthojit::runtime
