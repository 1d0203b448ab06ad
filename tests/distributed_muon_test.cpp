// The distributed optimizer's contract, run under mpirun with 1 to 4 processes (ctest starts it
// with each): for random models whose layouts force matrices across partition boundaries, every
// ZeRO stage and both orthogonalization modes,
//   * given the same reduced gradients (rank 0 supplies the gradient, the others zeros, summed
//     without averaging: the reduction is exact), the parameters after several steps are
//     bit-identical to the single-rank optimizer's, on every rank;
//   * through real reductions (every rank its own gradients, averaged) they agree with the
//     single-rank optimizer on the f64-averaged gradients within f32 reduction-order tolerance;
//   * the averaging itself: with every rank's own gradients made exact to sum (small integers
//     times 2^-6) and settings under which the update scales with the gradient, parameters and
//     momentum are bit-identical to the single-rank optimizer fed the mean (and measurably
//     different from it fed the sum, which is what a missing 1/world would give);
//   * in deepspeed mode the momentum of a straddling matrix is identical on all its owners;
//   * accumulated micro-batches give one Muon application on their sum;
//   * the bytes each rank sends match the plan's formulas;
//   * a non-finite gradient on one rank skips the step on all;
//   * the step hyperparameters set between steps act as the single-rank optimizer's settings;
//   (checkpoints: distributed_checkpoint_test.cpp);
//   * a failure on one rank while building (a program that does not compile there) throws on
//     every rank instead of leaving the others waiting in a collective.
// GoogleTest runs on every rank (tests/mpi_test_main.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>

#include <unistd.h>

#include "tests/distributed_test_support.h"

namespace orthojit::runtime {

namespace {

using namespace distributed_testing;

TEST_P(Distributed, SameReducedGradientsGiveBitIdenticalParameters) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  for (uint32_t trial = 0; trial < 3; ++trial) {
    const uint32_t seed = 1000 * static_cast<uint32_t>(stage) + 100 * static_cast<uint32_t>(mode) + trial;
    const Model model = random_model(seed);
    Buffers distributed = make_buffers(model, seed + 1), single = make_buffers(model, seed + 1);
    DistributedSettings settings = summed(stage, mode);
    settings.alignment = 1 + trial;  // 1, 2, 3: boundaries move
    // Bucket rounds of one element per partition, of 7 (a short last round), and the default (one
    // round for these models).
    settings.bucket_elements = trial == 0 ? 1 : trial == 1 ? 7 * communicator.world() : DistributedSettings{}.bucket_elements;
    DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
    HybridOptimizer reference(single.parameters(model), optimizer_settings());
    std::mt19937 random(seed + 2);
    step_both_and_compare(model, distributed, single, optimizer, reference, stage, random, label(stage, mode));
    // deepspeed mode: every owner of a straddling matrix holds the same momentum.
    if (mode == OrthogonalizationMode::DeepSpeed)
      for (const PlannedTensor& tensor : optimizer.plan().tensors) {
        if (!tensor.tensor.muon || !tensor.straddles()) continue;
        std::vector<float> first(static_cast<size_t>(tensor.tensor.elements), 0.0f);
        const int root = tensor.owners.front();
        if (communicator.rank() == root) first = *optimizer.momentum(tensor.tensor.name);
        communicator.broadcast(first.data(), tensor.tensor.elements * 4, root);
        if (const auto mine = optimizer.momentum(tensor.tensor.name)) {
          EXPECT_EQ(std::memcmp(mine->data(), first.data(), first.size() * 4), 0) << tensor.tensor.name << " momentum differs on rank " << communicator.rank();
        }
      }
  }
}

// Balanced mode orthogonalizes each matrix of a batch on its own rank (partition_plan.h): an
// expert tensor of 8 matrices that dominates the work is spread over the ranks, and the
// partition boundaries cut through some of its matrices, so U's and O's pieces travel per
// matrix between several owners and several orthogonalizers. Bit-identical to the single-rank
// optimizer at every stage; the test checks the plan really does split the tensor.
TEST(DistributedBalanced, ExpertTensorSplitAcrossOwnersAndOrthogonalizersIsBitIdentical) {
  Communicator& communicator = *world_communicator;
  const Model model{{"embed.weight", "layer.experts", "layer.bias", "head.weight"}, {{7, 5}, {8, 9, 13}, {11}, {6, 9}}, {true, true, false, true}};
  for (int stage : {1, 2, 3}) {
    Buffers distributed = make_buffers(model, 41), single = make_buffers(model, 41);
    DistributedSettings settings;
    settings.stage = stage;
    settings.mode = OrthogonalizationMode::Balanced;
    settings.alignment = 2;
    settings.average_gradients = false;
    DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
    HybridOptimizer reference(single.parameters(model), optimizer_settings());
    const PlannedTensor& experts = optimizer.plan().tensors[1];
    ASSERT_EQ(experts.matrix_orthogonalizers.size(), 8u);
    if (communicator.world() > 1) {
      EXPECT_GT(experts.orthogonalizers.size(), 1u) << "the expert tensor was not spread over the ranks";
      bool cut = false;  // a matrix whose elements two ranks own
      for (int64_t b = 0; b < 8; ++b) {
        const int64_t begin = experts.offset + b * 9 * 13, end = begin + 9 * 13 - 1;
        cut = cut || begin / optimizer.plan().partition_elements != end / optimizer.plan().partition_elements;
      }
      EXPECT_TRUE(cut) << "no expert matrix straddles a partition boundary";
    }
    std::mt19937 random(43);
    step_both_and_compare(model, distributed, single, optimizer, reference, stage, random, label(stage, OrthogonalizationMode::Balanced));
  }
}

// missing_grad = zero (keller, deepspeed): a parameter without a gradient on a step is stepped with
// zeros, as in the single-rank optimizer, bit for bit; under skip every rank must give every
// gradient, and a missing one is an error that names the setting.
TEST_P(Distributed, MissingGradientsAreZerosAsInTheSingleRankOptimizer) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const uint32_t seed = 7000 + 10 * static_cast<uint32_t>(stage) + static_cast<uint32_t>(mode);
  const Model model = random_model(seed);
  Buffers distributed = make_buffers(model, seed + 1), single = make_buffers(model, seed + 1);
  DistributedSettings settings = summed(stage, mode);
  ASSERT_EQ(optimizer_settings().missing_gradient, MissingGradient::Zero);
  DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
  HybridOptimizer reference(single.parameters(model), optimizer_settings());
  std::mt19937 random(seed + 2);
  const std::vector<size_t> missing = {0, model.names.size() - 1};
  for (int step = 0; step < 3; ++step) {
    fill_gradients(single, random);
    for (size_t t = 0; t < model.names.size(); ++t) {
      const bool absent = step == 1 && std::count(missing.begin(), missing.end(), t);
      if (communicator.rank() == 0) distributed.grad[t] = single.grad[t];
      else std::fill(distributed.grad[t].begin(), distributed.grad[t].end(), 0.0f);
      optimizer.set_gradient(model.names[t], absent ? nullptr : distributed.grad[t].data(), DType::F32);
      reference.set_gradient(model.names[t], absent ? nullptr : single.grad[t].data(), DType::F32);
    }
    step_both_once(model, distributed, single, optimizer, reference, stage, "step " + std::to_string(step) + ", " + label(stage, mode));
  }
  OptimizerSettings skip = optimizer_settings();
  skip.missing_gradient = MissingGradient::Skip;
  Buffers other = make_buffers(model, seed + 3);
  DistributedOptimizer skipping(other.parameters(model), skip, settings, communicator);
  skipping.set_gradient(model.names[0], nullptr, DType::F32);
  try {
    skipping.step();
    ADD_FAILURE() << "a missing gradient under missing_grad = skip was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("missing_grad = zero"), std::string::npos) << error.what();
  }
  // On one rank only (the last): every rank throws instead of the others waiting in the
  // reduction, nothing changes, and the ranks stay in step for the next call.
  const int last = communicator.world() - 1;
  skipping.set_gradient(model.names[0], communicator.rank() == last ? nullptr : other.grad[0].data(), DType::F32);
  const std::vector<std::vector<float>> before = other.data;
  try {
    communicator.rank() % 2 == 0 ? (void)skipping.step() : skipping.accumulate_gradients();
    ADD_FAILURE() << "a gradient missing on rank " << last << " only was accepted on rank " << communicator.rank();
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(communicator.rank(), last) << error.what();
  } catch (const std::runtime_error& error) {
    EXPECT_NE(communicator.rank(), last) << error.what();
    EXPECT_NE(std::string(error.what()).find("failed on 1 other rank"), std::string::npos) << error.what();
  }
  EXPECT_EQ(other.data, before) << "a refused micro-batch changed a parameter on rank " << communicator.rank();
  skipping.set_gradient(model.names[0], other.grad[0].data(), DType::F32);
  EXPECT_FALSE(skipping.step().skipped);
}

TEST_P(Distributed, RealReductionsAgreeWithinF32Tolerance) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const int world = communicator.world();
  const uint32_t seed = 77 + static_cast<uint32_t>(stage) * 7 + static_cast<uint32_t>(mode);
  const Model model = random_model(seed);
  Buffers distributed = make_buffers(model, seed + 1), single = make_buffers(model, seed + 1);
  DistributedSettings settings;
  settings.stage = stage;
  settings.mode = mode;
  DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
  HybridOptimizer reference(single.parameters(model), optimizer_settings());
  for (int step = 0; step < 3; ++step) {
    // Every rank's gradients (rank r uses seed r), and their f64 average for the reference.
    std::vector<std::vector<double>> average(model.names.size());
    for (size_t t = 0; t < model.names.size(); ++t) average[t].assign(distributed.grad[t].size(), 0.0);
    for (int r = 0; r < world; ++r) {
      std::mt19937 random(seed * 31 + static_cast<uint32_t>(step) * 977 + static_cast<uint32_t>(r));
      Buffers local = make_buffers(model, 0);
      fill_gradients(local, random);
      for (size_t t = 0; t < model.names.size(); ++t) {
        for (size_t i = 0; i < average[t].size(); ++i) average[t][i] += local.grad[t][i] / static_cast<double>(world);
        if (r == communicator.rank()) distributed.grad[t] = local.grad[t];
      }
    }
    for (size_t t = 0; t < model.names.size(); ++t)
      for (size_t i = 0; i < average[t].size(); ++i) single.grad[t][i] = static_cast<float>(average[t][i]);
    optimizer.step();
    if (stage == 3) optimizer.gather_parameters();
    reference.step();
  }
  // The reductions' order changes the f32 gradient by a few ulps; Newton–Schulz and three steps
  // of lr 0.02 carry that into the parameters at well under 1e-4.
  for (size_t t = 0; t < model.names.size(); ++t)
    for (size_t i = 0; i < single.data[t].size(); ++i)
      EXPECT_NEAR(distributed.data[t][i], single.data[t][i], 1e-4) << model.names[t] << "[" << i << "] (" << label(stage, mode) << ")";
}

// Gradients that are small integers times 2^-6 (|g| <= 1): any sum of up to 4 ranks times 2
// micro-batches is below 2^10 units of 2^-6, far inside f32's 24 bits, so every reduction order
// gives the same exact sum S. The distributed step then divides once in f32, fl(S / R); the test's
// mean is S / R in f64 rounded to f32, which is the same number (double rounding is innocuous for
// a quotient of two f32 values: 53 >= 2·24 + 2 bits). Hence bit-identity is a fair check here.
void fill_exact_gradients(Buffers& buffers, std::mt19937& random) {
  std::uniform_int_distribution<int> integer(-64, 64);
  for (auto& g : buffers.grad)
    for (float& v : g) v = std::ldexp(static_cast<float>(integer(random)), -6);
}


// Settings under which the gradient's scale survives into the parameters, so a missing 1/world
// cannot hide: Newton–Schulz normalizes X / (‖X‖_F + eps), and with eps = 1e4 far above ‖U‖_F
// (about 15 here) X₀ ≈ U / 1e4 and the iteration stays in its linear range (σ₀ <= 2e-3, times
// 3.4445 per step), so O is close to proportional to U; AdamW's m̂ / (√v̂ + eps) with eps = 1e3
// is close to m̂ / 1e3, linear in the gradient (lr 1 keeps the step visible, about 5e-4). No weight
// decay. The momentum buffers are linear in the averaged gradient whatever the settings.
OptimizerSettings scale_sensitive_settings() {
  OptimizerSettings settings = optimizer_settings();
  settings.muon.weight_decay = 0;
  settings.muon.ns_eps = 1e4;
  settings.adam.weight_decay = 0;
  settings.adam.eps = 1e3;
  settings.adam.lr = 1.0;
  return settings;
}

TEST_P(Distributed, EveryRanksOwnGradientsAreAveraged) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const int world = communicator.world();
  const int rank = communicator.rank();
  for (uint32_t trial = 0; trial < 2; ++trial) {
    const uint32_t seed = 3000 + 100 * static_cast<uint32_t>(stage) + 10 * static_cast<uint32_t>(mode) + trial;
    Model model = random_model(seed);
    // Both groups, whatever the draw: a matrix and a bias at the end of the buffer.
    model.names.push_back("tail.weight");
    model.shapes.push_back({5, 11});
    model.muon.push_back(true);
    model.names.push_back("tail.bias");
    model.shapes.push_back({7});
    model.muon.push_back(false);
    Buffers distributed = make_buffers(model, seed + 1), mean = make_buffers(model, seed + 1), sum = make_buffers(model, seed + 1);
    DistributedSettings settings;
    settings.stage = stage;
    settings.mode = mode;
    settings.alignment = 1 + 2 * trial;  // 1, 3: boundaries move
    DistributedOptimizer optimizer(distributed.parameters(model), scale_sensitive_settings(), settings, communicator);
    HybridOptimizer reference(mean.parameters(model), scale_sensitive_settings());
    HybridOptimizer unaveraged(sum.parameters(model), scale_sensitive_settings());  // the control
    for (int step = 0; step < 3; ++step) {
      const int micro_batches = step == 2 ? 2 : 1;  // the last step accumulates two
      // Every rank draws every rank's gradients (rank r's own seed); the mean in f64 is the reference's.
      std::vector<std::vector<double>> total(model.names.size());
      for (size_t t = 0; t < model.names.size(); ++t) total[t].assign(distributed.grad[t].size(), 0.0);
      std::vector<Buffers> mine;
      for (int r = 0; r < world; ++r)
        for (int micro = 0; micro < micro_batches; ++micro) {
          std::mt19937 random(seed * 7919u + static_cast<uint32_t>(step) * 104729u + static_cast<uint32_t>(micro) * 15485863u + static_cast<uint32_t>(r));
          Buffers local = make_buffers(model, 0);
          fill_exact_gradients(local, random);
          for (size_t t = 0; t < model.names.size(); ++t)
            for (size_t i = 0; i < total[t].size(); ++i) total[t][i] += local.grad[t][i];
          if (r == rank) mine.push_back(std::move(local));
        }
      for (size_t t = 0; t < model.names.size(); ++t)
        for (size_t i = 0; i < total[t].size(); ++i) {
          mean.grad[t][i] = static_cast<float>(total[t][i] / world);
          sum.grad[t][i] = static_cast<float>(total[t][i]);  // exact
        }
      for (const Buffers& micro : mine) {
        for (size_t t = 0; t < model.names.size(); ++t) std::copy(micro.grad[t].begin(), micro.grad[t].end(), distributed.grad[t].begin());
        if (micro_batches > 1) optimizer.accumulate_gradients();
      }
      const StepReport report = optimizer.step();
      EXPECT_FALSE(report.skipped) << report.reason;
      if (stage == 3) optimizer.gather_parameters();
      reference.step();
      unaveraged.step();
      const std::string where = " after step " + std::to_string(step) + " on rank " + std::to_string(rank) + " of " + std::to_string(world) + " (" +
                                label(stage, mode) + ", alignment " + std::to_string(settings.alignment) + ")";
      for (size_t t = 0; t < model.names.size(); ++t) {
        const std::string difference = bitwise_difference(distributed.data[t].data(), mean.data[t].data(), distributed.data[t].size());
        EXPECT_EQ(difference, "") << model.names[t] << " differs from the single-rank optimizer on the mean gradient" << where;
      }
      // The momentum this rank holds (deepspeed: the whole matrix; balanced: its slice).
      const RankSummary& part = optimizer.plan().ranks[static_cast<size_t>(rank)];
      for (const PlannedTensor& tensor : optimizer.plan().tensors) {
        if (!tensor.tensor.muon) continue;
        const std::vector<float>& expected = reference.state().at(tensor.tensor.name).momentum;
        const std::optional<std::vector<float>> held = optimizer.momentum(tensor.tensor.name);
        const int64_t lo = std::clamp<int64_t>(part.begin - tensor.offset, 0, tensor.tensor.elements);
        const int64_t hi = std::clamp<int64_t>(part.end - tensor.offset, 0, tensor.tensor.elements);
        if (hi <= lo) {
          EXPECT_FALSE(held.has_value()) << tensor.tensor.name << where;
          continue;
        }
        // No ASSERT here: a rank that returned early would leave the others waiting in the next
        // step's collectives.
        const bool whole = mode == OrthogonalizationMode::DeepSpeed;
        const int64_t begin = whole ? 0 : lo, count = whole ? tensor.tensor.elements : hi - lo;
        if (!held || static_cast<int64_t>(held->size()) != count) {
          ADD_FAILURE() << tensor.tensor.name << ": this rank holds " << (held ? std::to_string(held->size()) : std::string("no")) << " momentum elements, expected "
                        << count << where;
          continue;
        }
        const std::string difference = bitwise_difference(held->data(), expected.data() + begin, static_cast<size_t>(count));
        EXPECT_EQ(difference, "") << tensor.tensor.name << " momentum differs from the single-rank optimizer's on the mean gradient" << where;
      }
    }
    // The control: with these settings the sum (what a missing 1/world gives) moves every tensor
    // far from the mean's result, Muon and AdamW alike, so the checks above can fail.
    if (world > 1)
      for (size_t t = 0; t < model.names.size(); ++t) {
        float largest = 0;
        for (size_t i = 0; i < sum.data[t].size(); ++i) largest = std::max(largest, std::fabs(sum.data[t][i] - mean.data[t][i]));
        EXPECT_GT(largest, 1e-5f) << model.names[t] << " (" << (model.muon[t] ? "Muon" : "AdamW") << "): the settings hide the gradient's scale";
      }
  }
}

TEST_P(Distributed, AccumulatedMicroBatchesAreOneStepOnTheirSum) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const uint32_t seed = 555 + static_cast<uint32_t>(stage);
  const Model model = random_model(seed);
  Buffers distributed = make_buffers(model, seed + 1), single = make_buffers(model, seed + 1);
  DistributedSettings settings = summed(stage, mode);
  settings.bucket_elements = 5 * communicator.world();  // several rounds, the last one short
  DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
  HybridOptimizer reference(single.parameters(model), optimizer_settings());
  std::mt19937 random(seed);
  Buffers first = make_buffers(model, 0), second = make_buffers(model, 0);
  fill_gradients(first, random);
  fill_gradients(second, random);
  for (const Buffers* micro : {&first, &second}) {
    for (size_t t = 0; t < model.names.size(); ++t)
      if (communicator.rank() == 0) distributed.grad[t] = micro->grad[t];
      else std::fill(distributed.grad[t].begin(), distributed.grad[t].end(), 0.0f);
    optimizer.accumulate_gradients();
  }
  optimizer.step();
  if (stage == 3) optimizer.gather_parameters();
  for (size_t t = 0; t < model.names.size(); ++t)
    for (size_t i = 0; i < single.grad[t].size(); ++i) single.grad[t][i] = 0.0f + first.grad[t][i] + second.grad[t][i];  // the order accumulate uses
  reference.step();
  for (size_t t = 0; t < model.names.size(); ++t)
    EXPECT_EQ(std::memcmp(distributed.data[t].data(), single.data[t].data(), distributed.data[t].size() * 4), 0) << model.names[t] << " (" << label(stage, mode) << ")";
}

TEST_P(Distributed, BytesSentMatchThePlan) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const int world = communicator.world();
  const Model model = random_model(4242 + static_cast<uint32_t>(stage));
  Buffers buffers = make_buffers(model, 1);
  DistributedSettings settings;
  settings.stage = stage;
  settings.mode = mode;
  DistributedOptimizer optimizer(buffers.parameters(model), optimizer_settings(), settings, communicator);
  std::mt19937 random(9);
  fill_gradients(buffers, random);
  optimizer.step();
  float sent = static_cast<float>(optimizer.bytes_sent_last_step());
  communicator.all_reduce_sum(&sent, 1);
  int64_t expected = 0;
  for (const CollectiveBytes& collective : optimizer.plan().collectives)
    if (collective.name.find("forward and backward") == std::string::npos) expected += collective.bytes;
  expected += 2 * (world - 1) * 4;  // the all-reduce of the non-finite flag (one f32)
  // Per-rank counts of the ring collectives are rounded to whole bytes: allow one byte per rank
  // per collective.
  EXPECT_NEAR(static_cast<double>(sent), static_cast<double>(expected), 4.0 * world) << label(stage, mode);
}

TEST_P(Distributed, NonFiniteGradientOnOneRankSkipsEverywhere) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const Model model = random_model(99);
  Buffers buffers = make_buffers(model, 2);
  DistributedSettings settings;
  settings.stage = stage;
  settings.mode = mode;
  DistributedOptimizer optimizer(buffers.parameters(model), optimizer_settings(), settings, communicator);
  const auto before = buffers.data;
  std::mt19937 random(3);
  fill_gradients(buffers, random);
  if (communicator.rank() == communicator.world() - 1) buffers.grad.back().back() = std::numeric_limits<float>::quiet_NaN();
  const StepReport report = optimizer.step();
  EXPECT_TRUE(report.skipped);
  EXPECT_NE(report.reason.find("skipped on every rank"), std::string::npos) << report.reason;
  for (size_t t = 0; t < model.names.size(); ++t) EXPECT_EQ(buffers.data[t], before[t]) << model.names[t];
}

// The hyperparameters set after construction are the ones a step uses: a distributed optimizer
// built with other values and given these (every field distinct, so two swapped fields show)
// steps bit-identically to the single-rank optimizer built with them; a learning rate changed
// between steps (a scheduler) acts on both alike.
TEST_P(Distributed, HyperparametersSetBetweenStepsActAsSettings) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const uint32_t seed = 5000 + 10 * static_cast<uint32_t>(stage) + static_cast<uint32_t>(mode);
  const Model model = random_model(seed);
  Buffers distributed = make_buffers(model, seed + 1), single = make_buffers(model, seed + 1);
  DistributedSettings settings = summed(stage, mode);
  OptimizerSettings wanted = optimizer_settings();
  wanted.muon.lr = 0.031;
  wanted.muon.momentum = 0.83;
  wanted.muon.weight_decay = 0.07;
  wanted.adam.lr = 0.0021;
  wanted.adam.beta1 = 0.71;
  wanted.adam.beta2 = 0.93;
  wanted.adam.eps = 3e-7;
  wanted.adam.weight_decay = 0.05;
  DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
  StepHyperparameters values = step_hyperparameters(wanted);
  // A refused value changes nothing (the valid ones given with it included).
  StepHyperparameters refused = values;
  refused.adam_beta2 = 1.0;
  EXPECT_THROW(optimizer.set_hyperparameters(refused), std::invalid_argument);
  EXPECT_EQ(optimizer.hyperparameters().muon_lr, optimizer_settings().muon.lr);
  optimizer.set_hyperparameters(values);
  HybridOptimizer reference(single.parameters(model), wanted);
  std::mt19937 random(seed + 2);
  step_both_and_compare(model, distributed, single, optimizer, reference, stage, random, label(stage, mode));
  values.muon_lr *= 0.5;
  values.adam_lr *= 0.25;
  optimizer.set_hyperparameters(values);
  reference.set_learning_rates(values.muon_lr, values.adam_lr);
  step_both_and_compare(model, distributed, single, optimizer, reference, stage, random, label(stage, mode) + ", learning rates changed");
}

// A program that cannot be read on one rank only (a path that exists elsewhere): before, that
// rank threw at construction and the others went on into the first step's collectives and
// waited forever. Now every rank throws at construction.
TEST(DistributedState, AFailureOnOneRankWhileBuildingThrowsOnEveryRank) {
  Communicator& communicator = *world_communicator;
  const Model model = random_model(41);
  Buffers buffers = make_buffers(model, 42);
  OptimizerSettings settings = optimizer_settings();
  const bool failing = communicator.rank() == communicator.world() - 1;
  if (failing) settings.muon.program = "/nonexistent/orthojit-test-program.oj";
  try {
    DistributedOptimizer optimizer(buffers.parameters(model), settings, DistributedSettings{}, communicator);
    ADD_FAILURE() << "rank " << communicator.rank() << " built an optimizer while another rank could not";
  } catch (const std::exception& error) {
    const std::string message = error.what();
    if (failing) EXPECT_NE(message.find("orthojit-test-program.oj"), std::string::npos) << message;
    else EXPECT_NE(message.find("failed on 1 other rank(s)"), std::string::npos) << message;
  }
  // The ranks are still in step: the same optimizer builds everywhere afterwards.
  EXPECT_NO_THROW(DistributedOptimizer(buffers.parameters(model), optimizer_settings(), DistributedSettings{}, communicator));
}

// Matrix options split a matrix into blocks each orthogonalized on its own (a fused QKV's row
// splits, per-head rows): every owner of such a matrix (deepspeed) or its one orthogonalizer
// (balanced) runs the blocks as the single-rank optimizer does, bit for bit; options on an AdamW
// tensor are refused (they would be ignored).
TEST_P(Distributed, SplitMatricesAreBitIdentical) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const Model model{{"attn.qkv.weight", "attn.out.weight", "mlp.bias", "mlp.weight"}, {{12, 5}, {6, 7}, {9}, {11, 4}}, {true, true, false, true}};
  Buffers distributed = make_buffers(model, 91), single = make_buffers(model, 91);
  auto with_options = [&](Buffers& buffers) {
    std::vector<Parameter> parameters = buffers.parameters(model);
    parameters[0].row_splits = {4, 4, 4};  // q, k, v
    parameters[0].head_rows = 2;
    parameters[1].head_rows = 3;
    return parameters;
  };
  DistributedSettings settings = summed(stage, mode);
  DistributedOptimizer optimizer(with_options(distributed), optimizer_settings(), settings, communicator);
  HybridOptimizer reference(with_options(single), optimizer_settings());
  std::mt19937 random(92);
  step_both_and_compare(model, distributed, single, optimizer, reference, stage, random, label(stage, mode) + ", split matrices");
  std::vector<Parameter> adam_with_options = distributed.parameters(model);
  adam_with_options[2].head_rows = 3;  // the AdamW bias
  EXPECT_THROW(DistributedOptimizer(adam_with_options, optimizer_settings(), settings, communicator), std::invalid_argument);
}

// QK-clip with each rank's own S_max (its batch's attention logits): every rank clips with the
// largest value of each head over the ranks, so after the step and the clip every rank's
// parameters are bit-identical to the single-rank optimizer clipped with those maxima; wrong
// arguments on one rank only (an S_max of another length) are refused on every rank, nothing
// changed.
TEST_P(Distributed, QkClipTakesEachHeadsLargestLogitOverTheRanks) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const Model model{{"attn.q.weight", "attn.k.weight", "norm.bias", "mlp.weight"}, {{12, 5}, {12, 5}, {7}, {9, 6}}, {true, true, false, true}};
  Buffers distributed = make_buffers(model, 61), single = make_buffers(model, 61);
  DistributedSettings settings = summed(stage, mode);
  DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
  HybridOptimizer reference(single.parameters(model), optimizer_settings());
  std::mt19937 random(62);
  const double tau = 10.0;
  const int world = communicator.world();
  for (int round = 0; round < 2; ++round) {
    step_both_and_compare(model, distributed, single, optimizer, reference, stage, random, label(stage, mode) + ", before QK-clip");
    // Head h's logit on rank r: above τ on some ranks only, the largest on a rank that moves with h.
    std::vector<double> mine(4), largest(4, 0.0);
    for (int h = 0; h < 4; ++h)
      for (int r = 0; r < world; ++r) {
        const double logit = 4.0 + 3.0 * h + 5.0 * ((r + h + round) % world) + 0.25 * r;
        if (r == communicator.rank()) mine[static_cast<size_t>(h)] = logit;
        largest[static_cast<size_t>(h)] = std::max(largest[static_cast<size_t>(h)], logit);
      }
    optimizer.qk_clip("attn.q.weight", "attn.k.weight", 3, mine, tau);
    if (stage == 3) optimizer.gather_parameters();
    reference.qk_clip("attn.q.weight", "attn.k.weight", 3, largest, tau);
    for (size_t t = 0; t < model.names.size(); ++t)
      EXPECT_EQ(bitwise_difference(distributed.data[t].data(), single.data[t].data(), distributed.data[t].size()), "")
          << model.names[t] << " after QK-clip round " << round << " on rank " << communicator.rank() << " (" << label(stage, mode) << ")";
  }
  // S_max of another length on the last rank: every rank refuses, no parameter changes.
  const std::vector<std::vector<float>> before = distributed.data;
  std::vector<double> wrong(communicator.rank() == world - 1 ? 3 : 4, 50.0);
  EXPECT_THROW(optimizer.qk_clip("attn.q.weight", "attn.k.weight", 3, wrong, tau), std::invalid_argument);
  EXPECT_THROW(optimizer.qk_clip("attn.q.weight", "attn.q.weight", 3, std::vector<double>(4, 50.0), tau), std::invalid_argument);
  EXPECT_EQ(distributed.data, before);
}

// Gradient clipping by the reduced gradient's global norm: the norm the step reports is the f64
// norm of the whole reduced gradient (every element once, whatever the partition), and the step is
// the single-rank optimizer's on that gradient divided by c = fl32((‖g‖ + 1e-6) / max) when
// c > 1, bit for bit; a max above every norm changes nothing.
TEST_P(Distributed, GradientClippingUsesTheReducedGradientsGlobalNorm) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  for (const double max_norm : {3.0, 1e9}) {
    const uint32_t seed = 8000 + 10 * static_cast<uint32_t>(stage) + static_cast<uint32_t>(mode) + (max_norm > 100 ? 5 : 0);
    const Model model = random_model(seed);
    Buffers distributed = make_buffers(model, seed + 1), single = make_buffers(model, seed + 1);
    DistributedSettings settings = summed(stage, mode);
    settings.alignment = 2;
    settings.max_gradient_norm = max_norm;
    DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
    HybridOptimizer reference(single.parameters(model), optimizer_settings());
    std::mt19937 random(seed + 2);
    for (int step = 0; step < 3; ++step) {
      fill_gradients(single, random);
      double squares = 0.0;
      for (size_t t = 0; t < model.names.size(); ++t) {
        for (float g : single.grad[t]) squares += static_cast<double>(g) * g;
        if (communicator.rank() == 0) distributed.grad[t] = single.grad[t];
        else std::fill(distributed.grad[t].begin(), distributed.grad[t].end(), 0.0f);
      }
      const StepReport report = optimizer.step();
      ASSERT_FALSE(report.skipped) << report.reason;
      if (stage == 3) optimizer.gather_parameters();
      EXPECT_NEAR(report.gradient_norm, std::sqrt(squares), 1e-12 * std::sqrt(squares)) << label(stage, mode) << ", step " << step;
      const double coefficient = (report.gradient_norm + 1e-6) / max_norm;
      EXPECT_EQ(coefficient > 1.0, max_norm < 100) << "norm " << report.gradient_norm;
      if (coefficient > 1.0)
        for (auto& g : single.grad)
          for (float& v : g) v /= static_cast<float>(coefficient);
      reference.step();
      for (size_t t = 0; t < model.names.size(); ++t)
        EXPECT_EQ(bitwise_difference(distributed.data[t].data(), single.data[t].data(), distributed.data[t].size()), "")
            << model.names[t] << " after step " << step << " on rank " << communicator.rank() << " (" << label(stage, mode) << ", max norm " << max_norm << ")";
    }
  }
  DistributedSettings negative;
  negative.max_gradient_norm = -1.0;
  const Model model = random_model(3);
  Buffers buffers = make_buffers(model, 4);
  EXPECT_THROW(DistributedOptimizer(buffers.parameters(model), optimizer_settings(), negative, communicator), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(StagesAndModes, Distributed,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(OrthogonalizationMode::DeepSpeed, OrthogonalizationMode::Balanced)));

// ZeRO-2/3 memory: at stages 2 and 3 a rank holds the reduced gradient of its own range only (its
// partition, widened in deepspeed mode to the Muon matrices it orthogonalizes whole), never a flat
// buffer of the whole model. The optimizer state is the same at every stage; stage 1 gathers the
// parameters through a partition-sized slice, stages 2-3 through the bucket (world x c elements,
// c = bucket / world). So each rank's allocations are stage 1's less 4 bytes per flat element
// outside that range, and the slice's bytes for the bucket's; a trainer that accumulates
// micro-batches adds one round of c, once. A large
// AdamW tensor makes the ranges much smaller than the model on more than one rank.
TEST(DistributedMemory, StagesTwoAndThreeHoldOnlyTheirGradientRange) {
  Communicator& communicator = *world_communicator;
  const int rank = communicator.rank(), world = communicator.world();
  Model model = random_model(97);
  model.names.push_back("final.norm");
  model.shapes.push_back({4000});
  model.muon.push_back(false);
  for (OrthogonalizationMode mode : {OrthogonalizationMode::DeepSpeed, OrthogonalizationMode::Balanced}) {
    Buffers buffers = make_buffers(model, 98);
    DistributedSettings settings;
    settings.mode = mode;
    settings.bucket_elements = 64 * world;
    settings.stage = 1;
    const DistributedOptimizer stage1(buffers.parameters(model), optimizer_settings(), settings, communicator);
    const int64_t padded = stage1.plan().padded_elements;
    for (int stage : {2, 3}) {
      settings.stage = stage;
      DistributedOptimizer optimizer(buffers.parameters(model), optimizer_settings(), settings, communicator);
      const RankSummary& mine = optimizer.plan().ranks[static_cast<size_t>(rank)];
      const int64_t range = mine.gradient_end - mine.gradient_begin;
      const int64_t chunk = std::min<int64_t>(64, optimizer.plan().partition_elements);
      const int64_t difference = 4 * (padded - range + optimizer.plan().partition_elements - world * chunk);
      EXPECT_EQ(stage1.memory_bytes() - optimizer.memory_bytes(), difference) << label(stage, mode) << " on rank " << rank << " of " << world;
      EXPECT_LE(range, padded);
      if (world > 1 && rank == world - 1) {  // the last partition is the AdamW tensor's only
        EXPECT_EQ(range, optimizer.plan().partition_elements) << label(stage, mode);
      }
      std::mt19937 random(99);
      fill_gradients(buffers, random);
      EXPECT_FALSE(optimizer.step().skipped);
      EXPECT_EQ(stage1.memory_bytes() - optimizer.memory_bytes(), difference) << label(stage, mode) << ": a step allocated";
      fill_gradients(buffers, random);
      optimizer.accumulate_gradients();
      optimizer.accumulate_gradients();
      EXPECT_FALSE(optimizer.step().skipped);
      EXPECT_EQ(stage1.memory_bytes() - optimizer.memory_bytes(), difference - 4 * chunk) << label(stage, mode) << ": accumulating micro-batches";
      optimizer.accumulate_gradients();
      optimizer.accumulate_gradients();
      EXPECT_FALSE(optimizer.step().skipped);
      EXPECT_EQ(stage1.memory_bytes() - optimizer.memory_bytes(), difference - 4 * chunk) << label(stage, mode) << ": accumulating again allocated";
    }
  }
}

TEST(DistributedSettingsTest, OffloadNeedsAHostBackendAndStagesAreChecked) {
  const Model model = random_model(5);
  Buffers buffers = make_buffers(model, 1);
  OptimizerSettings settings = optimizer_settings();
  settings.muon.backend = "cuda";
  DistributedSettings distributed;
  distributed.offload_optimizer = true;
  EXPECT_THROW(DistributedOptimizer(buffers.parameters(model), settings, distributed, *world_communicator), std::invalid_argument);
  distributed.offload_optimizer = false;
  distributed.stage = 4;
  EXPECT_THROW(DistributedOptimizer(buffers.parameters(model), optimizer_settings(), distributed, *world_communicator), std::invalid_argument);
}

// Ranks given different parameter lists are refused on every rank at construction: a Muon tag
// that differs (same sizes: it once ran with no error), a shape transposed (same element count)
// and an extra tensor on one rank (once a crash inside the transport).
TEST(DistributedSettingsTest, RanksWithDifferentParametersAreRefusedOnEveryRank) {
  Communicator& communicator = *world_communicator;
  if (communicator.world() == 1) GTEST_SKIP() << "one rank: nothing to compare";
  const Model model = random_model(77);
  const bool last = communicator.rank() == communicator.world() - 1;
  for (int change = 0; change < 3; ++change) {
    Model mine = model;
    if (last) {
      if (change == 0) mine.muon[1] = !mine.muon[1] || mine.shapes[1].size() == 1;
      if (change == 0 && mine.shapes[1].size() == 1) mine.names[1] += ".renamed";  // a bias cannot be Muon: rename it
      if (change == 1) std::reverse(mine.shapes[0].begin(), mine.shapes[0].end());
      if (change == 2) {
        mine.names.push_back("extra.bias");
        mine.shapes.push_back({3});
        mine.muon.push_back(false);
      }
    }
    if (change == 1 && mine.shapes[0] == model.shapes[0] && last) mine.names[0] += ".renamed";  // a square or 1-D first tensor
    Buffers buffers = make_buffers(mine, 1);
    try {
      DistributedOptimizer optimizer(buffers.parameters(mine), optimizer_settings(), DistributedSettings{}, communicator);
      ADD_FAILURE() << "change " << change << ": different parameter lists were accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("the ranks were given different parameters"), std::string::npos) << error.what();
    }
  }
  // The same lists still build.
  Buffers buffers = make_buffers(model, 1);
  EXPECT_NO_THROW(DistributedOptimizer(buffers.parameters(model), optimizer_settings(), DistributedSettings{}, communicator));
}

}  // namespace
}  // namespace orthojit::runtime

int main(int argc, char** argv) { return orthojit::runtime::distributed_testing::run_distributed_tests(argc, argv); }
