// The ZeRO partition planner: partitions cover the padded flat buffer, owners and straddlers are
// what the offsets say (checked against a brute-force walk over every element), deepspeed mode
// orthogonalizes on every owner, balanced mode once per matrix within 15% of the ideal on the
// example models, and the bytes each collective moves match the ring formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fstream>
#include <random>
#include <set>

#include "autotune/model_shapes.h"
#include "runtime/muon/deepspeed_config.h"
#include "runtime/zero/distributed_optimizer.h"
#include "runtime/zero/model_layout.h"
#include "runtime/zero/partition_plan.h"

namespace orthojit::runtime {
namespace {

std::vector<PlanTensor> random_model(std::mt19937& random, int count) {
  std::uniform_int_distribution<int64_t> extent(1, 40);
  std::vector<PlanTensor> tensors;
  for (int i = 0; i < count; ++i) {
    PlanTensor tensor;
    tensor.name = "t" + std::to_string(i);
    tensor.muon = random() % 3 != 0;
    tensor.rows = extent(random);
    tensor.cols = tensor.muon ? extent(random) : 1;
    tensor.batch = tensor.muon && random() % 4 == 0 ? 3 : 1;
    tensor.elements = tensor.batch * tensor.rows * tensor.cols;
    tensors.push_back(tensor);
  }
  return tensors;
}

TEST(PartitionPlan, OwnersAndStraddlersMatchAnElementWalk) {
  std::mt19937 random(std::random_device{}());
  for (int trial = 0; trial < 40; ++trial) {
    PlanSettings settings;
    settings.world = 1 + static_cast<int>(random() % 7);
    settings.stage = 1 + static_cast<int>(random() % 3);
    settings.alignment = std::vector<int64_t>{1, 2, 8, 16}[random() % 4];
    settings.mode = random() % 2 ? OrthogonalizationMode::DeepSpeed : OrthogonalizationMode::Balanced;
    const auto tensors = random_model(random, 1 + static_cast<int>(random() % 30));
    const PartitionPlan plan = plan_partitions(tensors, settings);
    SCOPED_TRACE("world " + std::to_string(settings.world) + " alignment " + std::to_string(settings.alignment));
    ASSERT_EQ(plan.ranks.size(), static_cast<size_t>(settings.world));
    EXPECT_EQ(plan.padded_elements % (settings.world * settings.alignment), 0);
    EXPECT_EQ(plan.ranks.front().begin, 0);
    EXPECT_EQ(plan.ranks.back().end, plan.padded_elements);
    for (size_t r = 1; r < plan.ranks.size(); ++r) EXPECT_EQ(plan.ranks[r].begin, plan.ranks[r - 1].end);
    int64_t previous_end = 0;
    for (const PlannedTensor& tensor : plan.tensors) {
      EXPECT_EQ(tensor.offset % settings.alignment, 0);
      EXPECT_GE(tensor.offset, previous_end);  // no overlap
      previous_end = tensor.offset + tensor.tensor.elements;
      std::set<int> owners;
      for (int64_t e = tensor.offset; e < previous_end; ++e)
        for (int r = 0; r < settings.world; ++r)
          if (e >= plan.ranks[static_cast<size_t>(r)].begin && e < plan.ranks[static_cast<size_t>(r)].end) owners.insert(r);
      EXPECT_EQ(std::vector<int>(owners.begin(), owners.end()), tensor.owners) << tensor.tensor.name;
      if (!tensor.tensor.muon) {
        EXPECT_TRUE(tensor.orthogonalizers.empty());
      } else if (settings.mode == OrthogonalizationMode::DeepSpeed) {
        EXPECT_EQ(tensor.orthogonalizers, tensor.owners);
      } else {
        // One orthogonalizer per matrix of the batch; the tensor's list is their distinct ranks.
        ASSERT_EQ(tensor.matrix_orthogonalizers.size(), static_cast<size_t>(tensor.tensor.batch));
        std::set<int> distinct(tensor.matrix_orthogonalizers.begin(), tensor.matrix_orthogonalizers.end());
        EXPECT_EQ(std::vector<int>(distinct.begin(), distinct.end()), tensor.orthogonalizers);
        for (int rank : distinct) EXPECT_TRUE(rank >= 0 && rank < settings.world);
      }
    }
    EXPECT_LE(previous_end, plan.padded_elements);
  }
}

TEST(PartitionPlan, BalancedModeIsWithinFifteenPercentOfIdealOnTheExampleModels) {
  for (const char* model : {"gpt2-small", "qwen2.5-3b", "llama-3-8b", "deepseek-v2-lite"}) {
    std::ifstream file(std::string(ORTHOJIT_SOURCE_DIR) + "/examples/models/" + model + ".json");
    const auto shapes = autotune::derive_model_matrices(nlohmann::json::parse(file));
    const auto tensors = model_plan_tensors(shapes);
    for (int world : {2, 4, 8}) {
      PlanSettings settings;
      settings.world = world;
      settings.stage = 2;
      settings.mode = OrthogonalizationMode::Balanced;
      const PartitionPlan plan = plan_partitions(tensors, settings);
      EXPECT_LE(plan.max_cost(), 1.15 * plan.ideal_cost()) << model << " on " << world << " ranks";
      double assigned = 0;
      for (const auto& rank : plan.ranks) assigned += rank.orthogonalization_cost;
      EXPECT_NEAR(assigned, plan.ideal_cost() * world, 1e-6 * assigned) << "every matrix exactly once";
    }
  }
}

// Issue: a batched expert tensor was one unit of work, so balanced mode stopped balancing once
// ranks outnumbered the tensors (DeepSeek-V2-Lite: 1.52x the ideal at 64 ranks, 3.03x at 256).
// With each matrix its own unit: within 5% of the ideal up to 1024 ranks, for DeepSeek-V2-Lite
// and a DeepSeek-V3-sized MoE (58 layers of 256 experts 2048 x 7168, 3 projections), each plan in
// well under a second; except where one matrix alone is more than the ideal share: no plan with
// whole matrices can do better than that matrix (DeepSeek-V2-Lite's dense first MLP, 10944 x 2048,
// is 2.14x the ideal at 1024 ranks), and the plan must reach that bound.
TEST(PartitionPlan, BalancedModeStaysBalancedWhenRanksOutnumberTheExpertTensors) {
  std::ifstream file(std::string(ORTHOJIT_SOURCE_DIR) + "/examples/models/deepseek-v2-lite.json");
  const auto lite = model_plan_tensors(autotune::derive_model_matrices(nlohmann::json::parse(file)));
  std::vector<PlanTensor> v3;
  for (int layer = 0; layer < 58; ++layer) {
    const std::string prefix = "layers." + std::to_string(layer) + ".";
    v3.push_back({prefix + "self_attn.q_proj", 7168LL * 7168, true, 1, 7168, 7168});
    v3.push_back({prefix + "self_attn.o_proj", 7168LL * 7168, true, 1, 7168, 7168});
    for (const char* projection : {"gate_proj", "up_proj", "down_proj"})
      v3.push_back({prefix + "mlp.experts." + projection, 256LL * 2048 * 7168, true, 256, 2048, 7168});
    v3.push_back({prefix + "input_layernorm.weight", 7168, false, 1, 7168, 1});
  }
  for (const auto& [name, tensors] : {std::pair{"deepseek-v2-lite", lite}, std::pair{"deepseek-v3-sized", v3}})
    for (int world : {8, 64, 256, 1024}) {
      PlanSettings settings;
      settings.world = world;
      settings.stage = 2;
      settings.mode = OrthogonalizationMode::Balanced;
      const auto started = std::chrono::steady_clock::now();
      const PartitionPlan plan = plan_partitions(tensors, settings);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      double largest = 0;  // the costliest single matrix: a lower bound on any plan's maximum
      for (const PlannedTensor& tensor : plan.tensors)
        if (tensor.tensor.muon) largest = std::max(largest, tensor.cost / static_cast<double>(tensor.tensor.batch));
      std::printf("%s on %d ranks: max/ideal NS work %.3f (largest matrix %.3f of the ideal), planned in %.3f s\n", name, world,
                  plan.max_cost() / plan.ideal_cost(), largest / plan.ideal_cost(), seconds);
      EXPECT_LE(plan.max_cost(), std::max(1.05 * plan.ideal_cost(), largest * (1 + 1e-12))) << name << " on " << world << " ranks";
      EXPECT_LT(seconds, 1.0) << name << " on " << world << " ranks";
    }
}

TEST(PartitionPlan, CollectiveBytesFollowTheRingFormulas) {
  // Two Muon matrices of 6 x 10 and an AdamW vector of 20: 140 elements, world 4, alignment 1:
  // padded to 140, partitions of 35. The first matrix [0, 60) straddles ranks 0 and 1, the second
  // [60, 120) ranks 1, 2 and 3.
  std::vector<PlanTensor> tensors = {{"a", 60, true, 1, 6, 10}, {"b", 60, true, 1, 6, 10}, {"bias", 20, false, 1, 20, 1}};
  PlanSettings settings;
  settings.world = 4;
  settings.stage = 2;
  settings.gradient_bytes = 2;
  settings.parameter_bytes = 2;
  const PartitionPlan plan = plan_partitions(tensors, settings);
  ASSERT_EQ(plan.partition_elements, 35);
  EXPECT_EQ(plan.tensors[0].owners, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.tensors[1].owners, (std::vector<int>{1, 2, 3}));
  ASSERT_EQ(plan.collectives.size(), 3u);
  EXPECT_EQ(plan.collectives[0].bytes, 3 * 2 * 140);  // reduce-scatter: (N−1)·G
  // Straddler gathers: a: rank 0 holds 35 and lacks 25, rank 1 holds 25 and lacks 35; b: rank 1
  // holds 10 (lacks 50), rank 2 holds 35 (lacks 25), rank 3 holds 15 (lacks 45).
  EXPECT_EQ(plan.collectives[1].bytes, 2 * (25 + 35 + 50 + 25 + 45));
  EXPECT_EQ(plan.collectives[2].bytes, 3 * 2 * 140);  // all-gather parameters
  // Muon momentum: a full copy on every owner in deepspeed mode.
  EXPECT_EQ(plan.ranks[1].optimizer_bytes, 4 * (60 + 60));
  EXPECT_EQ(plan.ranks[3].optimizer_bytes, 4 * 60 + 8 * 20);
  settings.mode = OrthogonalizationMode::Balanced;
  const PartitionPlan balanced = plan_partitions(tensors, settings);
  EXPECT_EQ(balanced.ranks[1].optimizer_bytes, 4 * 35);  // slices only
  // The reduced gradient each rank holds at stage 2: its partition, widened in deepspeed mode to
  // the matrices it orthogonalizes whole (rank 0: a [0, 60); rank 1: a and b [0, 120); ranks 2
  // and 3: b [60, 120), rank 3 also its own [105, 140)); balanced: the partition; stage 1: all.
  const std::vector<std::pair<int64_t, int64_t>> deepspeed_ranges = {{0, 60}, {0, 120}, {60, 120}, {60, 140}};
  for (int rank = 0; rank < 4; ++rank) {
    const RankSummary& ds = plan.ranks[static_cast<size_t>(rank)];
    const RankSummary& bal = balanced.ranks[static_cast<size_t>(rank)];
    EXPECT_EQ(std::make_pair(ds.gradient_begin, ds.gradient_end), deepspeed_ranges[static_cast<size_t>(rank)]) << "rank " << rank;
    EXPECT_EQ(ds.gradient_bytes, 2 * (ds.gradient_end - ds.gradient_begin)) << "rank " << rank;
    EXPECT_EQ(std::make_pair(bal.gradient_begin, bal.gradient_end), std::make_pair(35 * int64_t{rank}, 35 * int64_t{rank + 1})) << "rank " << rank;
  }
  settings.stage = 1;
  for (const RankSummary& rank : plan_partitions(tensors, settings).ranks) EXPECT_EQ(std::make_pair(rank.gradient_begin, rank.gradient_end), std::make_pair(int64_t{0}, int64_t{140}));
  settings.stage = 2;
  EXPECT_THROW(plan_partitions(tensors, PlanSettings{0, 1}), std::invalid_argument);
  EXPECT_THROW(plan_partitions(tensors, PlanSettings{2, 4}), std::invalid_argument);
  EXPECT_THROW(plan_partitions({{"bad", 10, true, 1, 3, 3}}, settings), std::invalid_argument);
}

TEST(PartitionPlan, DeepSpeedZeroSectionsBecomeDistributedSettings) {
  auto config = [](const char* zero) {
    return nlohmann::json::parse(std::string(R"({"optimizer": {"type": "muon", "params": {}}, "zero_optimization": )") + zero + "}");
  };
  const DistributedSettings stage2 = distributed_settings(parse_deepspeed_config(config(R"({"stage": 2})")));
  EXPECT_EQ(stage2.stage, 2);
  EXPECT_FALSE(stage2.offload_optimizer);
  const DistributedSettings offload =
      distributed_settings(parse_deepspeed_config(config(R"({"stage": 2, "reduce_scatter": false, "offload_optimizer": {"device": "cpu"}})")));
  EXPECT_TRUE(offload.offload_optimizer);
  EXPECT_EQ(stage2.max_gradient_norm, 0.0);  // no gradient_clipping: no clipping
  const DistributedSettings clipped = distributed_settings(parse_deepspeed_config(nlohmann::json::parse(
      R"({"optimizer": {"type": "muon", "params": {}}, "gradient_clipping": 1.5, "zero_optimization": {"stage": 1}})")));
  EXPECT_EQ(clipped.max_gradient_norm, 1.5);
  EXPECT_EQ(stage2.bucket_elements, DistributedSettings{}.bucket_elements);  // not DeepSpeed's default 5e8: only a given size
  EXPECT_EQ(distributed_settings(parse_deepspeed_config(config(R"({"stage": 2, "reduce_bucket_size": 12345})"))).bucket_elements, 12345);
  EXPECT_THROW(distributed_settings(parse_deepspeed_config(config(R"({"stage": 0})"))), std::invalid_argument);
  try {
    distributed_settings(parse_deepspeed_config(config(R"({"stage": 3, "reduce_scatter": false, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}})")));
    FAIL() << "nvme offload was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("host memory"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace orthojit::runtime
