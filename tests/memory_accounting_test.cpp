// Optimizer-state accounting against hand counts: GPT-2 small (124,439,808 parameters with tied
// embeddings), its untied variant, Qwen2.5-3B (q/k/v biases) and Llama-3-8B (the seeds' ~45%).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "runtime/muon/memory_accounting.h"

namespace orthojit {
namespace {

nlohmann::json load_model(const std::string& name) {
  std::ifstream in(std::string(ORTHOJIT_SOURCE_DIR) + "/examples/models/" + name);
  EXPECT_TRUE(in.good()) << name;
  return nlohmann::json::parse(in);
}

TEST(MemoryAccounting, Gpt2SmallMatchesAHandCount) {
  const nlohmann::json config = load_model("gpt2-small.json");
  const int64_t d = config.at("n_embd"), layers = config.at("n_layer"), vocab = config.at("vocab_size"), positions = config.at("n_positions");
  const int64_t inner = 4 * d;  // n_inner is null
  // Muon: per block c_attn (d, 3d), attn.c_proj (d, d), c_fc (d, 4d), mlp.c_proj (4d, d).
  const int64_t muon = layers * (d * 3 * d + d * d + d * inner + inner * d);
  // AdamW matrices: wte (tied with lm_head, once) and wpe.
  const int64_t adam_matrices = vocab * d + positions * d;
  // 1-D: ln_1, ln_2 (weight + bias) and the biases of c_attn, attn.c_proj, c_fc, mlp.c_proj per
  // block; ln_f (weight + bias).
  const int64_t one_d = layers * (2 * d + 2 * d + 3 * d + d + inner + d) + 2 * d;
  ASSERT_EQ(muon + adam_matrices + one_d, 124439808);

  const runtime::MemoryReport report = runtime::account_memory(config);
  EXPECT_EQ(report.model_type, "gpt2");
  EXPECT_TRUE(report.tied_embeddings);
  EXPECT_EQ(report.muon_parameters, muon);
  EXPECT_EQ(report.adam_matrix_parameters, adam_matrices);
  EXPECT_EQ(report.one_dimensional.count, one_d);
  EXPECT_EQ(report.total_parameters(), 124439808);
  EXPECT_FALSE(report.one_dimensional.sources.empty());

  EXPECT_EQ(report.adamw_only().adam, 8 * 124439808LL);
  EXPECT_EQ(report.adamw_only().muon, 0);
  EXPECT_EQ(report.hybrid().muon, 4 * muon);
  EXPECT_EQ(report.hybrid().adam, 8 * (adam_matrices + one_d));
  EXPECT_EQ(report.hybrid().total(), 4 * muon + 8 * (adam_matrices + one_d));
  EXPECT_NEAR(report.reduction(), 0.5 * static_cast<double>(muon) / 124439808.0, 1e-12);
  EXPECT_NEAR(report.muon_share(), static_cast<double>(muon) / 124439808.0, 1e-12);

  // Per-head listing changes the matrices, not the counts.
  runtime::MemoryOptions per_head;
  per_head.per_head = true;
  EXPECT_EQ(runtime::account_memory(config, per_head).total_parameters(), 124439808);

  // Untied: lm_head is a second vocab x d matrix.
  runtime::MemoryOptions untied;
  untied.tied_embeddings = false;
  const runtime::MemoryReport separate = runtime::account_memory(config, untied);
  EXPECT_FALSE(separate.tied_embeddings);
  EXPECT_EQ(separate.adam_matrix_parameters, adam_matrices + vocab * d);
  EXPECT_EQ(separate.total_parameters(), 124439808 + vocab * d);

  const nlohmann::json json = runtime::to_json(report);
  EXPECT_EQ(json.at("parameters").at("total"), 124439808);
  EXPECT_EQ(json.at("optimizer_state_bytes").at("adamw_only").at("total"), 8 * 124439808LL);
  EXPECT_EQ(json.at("optimizer_state_bytes").at("hybrid").at("muon"), 4 * muon);
  const std::string table = runtime::format_memory_report(report);
  EXPECT_NE(table.find("124,439,808"), std::string::npos) << table;
  EXPECT_NE(table.find("less optimizer state than AdamW alone"), std::string::npos) << table;
}

TEST(MemoryAccounting, Llama3And8BSavesAbout45Percent) {
  const nlohmann::json config = load_model("llama-3-8b.json");
  const runtime::MemoryReport report = runtime::account_memory(config);
  const int64_t d = 4096, layers = 32, ff = 14336, vocab = 128256, kv = 8 * 128;
  EXPECT_FALSE(report.tied_embeddings);
  EXPECT_EQ(report.muon_parameters, layers * (2 * d * d + 2 * kv * d + 3 * d * ff));
  EXPECT_EQ(report.adam_matrix_parameters, 2 * vocab * d);
  EXPECT_EQ(report.one_dimensional.count, layers * 2 * d + d);  // RMSNorm weights
  EXPECT_EQ(report.total_parameters(), 8030261248);             // Meta-Llama-3-8B
  EXPECT_GT(report.reduction(), 0.40);
  EXPECT_LT(report.reduction(), 0.50);
  EXPECT_GT(report.muon_share(), 0.85);
}

TEST(MemoryAccounting, Qwen25CountsItsQkvBiasesAndTiedEmbedding) {
  const runtime::MemoryReport report = runtime::account_memory(load_model("qwen2.5-3b.json"));
  const int64_t d = 2048, layers = 36, kv = 2 * 128;
  EXPECT_TRUE(report.tied_embeddings);
  EXPECT_EQ(report.one_dimensional.count, layers * 2 * d + d + layers * (d + 2 * kv));
  EXPECT_EQ(report.total_parameters(), 3085938688);  // Qwen2.5-3B: 3.09B
}

TEST(MemoryAccounting, MixtureOfExpertsAndErrors) {
  const runtime::MemoryReport report = runtime::account_memory(load_model("deepseek-v2-lite.json"));
  EXPECT_GT(report.muon_share(), 0.9);
  EXPECT_GT(report.reduction(), 0.45);
  EXPECT_THROW(runtime::account_memory(nlohmann::json{{"hidden_size", 64}}), std::invalid_argument);
  EXPECT_THROW(runtime::account_memory(nlohmann::json::array()), std::invalid_argument);
}

}  // namespace
}  // namespace orthojit
