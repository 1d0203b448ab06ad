// What the distributed optimizer's tests under mpirun share (distributed_muon_test.cpp: the
// step's contract; distributed_checkpoint_test.cpp: the checkpoints): random models whose layouts
// force matrices across partition boundaries, their buffers, the single-rank optimizer as the
// reference, bit-for-bit comparisons, and a main that runs GoogleTest on every rank around a
// world communicator (tests/mpi_test_main.h).
#pragma once
#pragma GCC diagnostic ignored "-Wold-style-cast"  // MPI's C macros (MPI_COMM_WORLD, MPI_INT, ...)

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/zero/distributed_optimizer.h"
#include "runtime/zero/mpi_communicator.h"
#include "tests/mpi_test_main.h"

namespace orthojit::runtime {

// GoogleTest prints the parameters of a failing test with this (not as "4-byte object <00-00 00-00>").
inline void PrintTo(OrthogonalizationMode mode, std::ostream* out) { *out << to_string(mode); }

namespace distributed_testing {

inline MpiCommunicator* world_communicator = nullptr;

struct Model {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<bool> muon;
};

// A random model: matrices of awkward sizes (so partitions cut through them), a 3-D expert
// tensor, biases; the same on every rank (shared seed).
inline Model random_model(uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int64_t> extent(2, 13);
  Model model;
  const int count = 4 + static_cast<int>(random() % 5);
  for (int i = 0; i < count; ++i) {
    const int kind = static_cast<int>(random() % 4);
    model.names.push_back("layer" + std::to_string(i) + (kind == 0 ? ".bias" : kind == 3 ? ".experts" : ".weight"));
    if (kind == 0) model.shapes.push_back({extent(random)});
    else if (kind == 3) model.shapes.push_back({2, extent(random), extent(random)});
    else model.shapes.push_back({extent(random), extent(random)});
    model.muon.push_back(kind != 0);
  }
  return model;
}

inline int64_t elements(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

struct Buffers {
  std::vector<std::vector<float>> data, grad;
  std::vector<Parameter> parameters(const Model& model) {
    std::vector<Parameter> result;
    for (size_t i = 0; i < model.names.size(); ++i) {
      Parameter p;
      p.name = model.names[i];
      p.shape = model.shapes[i];
      p.data = data[i].data();
      p.grad = grad[i].data();
      p.use_muon = model.muon[i];
      if (model.shapes[i].size() == 3 && model.muon[i]) p.layout = MatrixLayout::Batch;  // matrix options are for Muon tensors
      result.push_back(p);
    }
    return result;
  }
};

inline Buffers make_buffers(const Model& model, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Buffers buffers;
  for (const auto& shape : model.shapes) {
    std::vector<float> values(static_cast<size_t>(elements(shape)));
    for (float& v : values) v = normal(random);
    buffers.data.push_back(values);
    buffers.grad.emplace_back(values.size(), 0.0f);
  }
  return buffers;
}

inline void fill_gradients(Buffers& buffers, std::mt19937& random) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& g : buffers.grad)
    for (float& v : g) v = normal(random);
}

inline OptimizerSettings optimizer_settings() {
  OptimizerSettings settings = preset_settings("keller");
  settings.muon.backend = "ref";
  settings.muon.precision = ScalarType::F32;
  settings.muon.weight_decay = 0.01;
  settings.adam.weight_decay = 0.01;
  return settings;
}

// The settings of the bit-identical comparisons: this stage and mode, the ranks' gradients summed
// without averaging (rank 0 gives the gradient, the others zeros: the reduction is exact).
inline DistributedSettings summed(int stage, OrthogonalizationMode mode) {
  DistributedSettings settings;
  settings.stage = stage;
  settings.mode = mode;
  settings.average_gradients = false;
  return settings;
}

inline std::string label(int stage, OrthogonalizationMode mode) { return "stage " + std::to_string(stage) + ", " + to_string(mode) + " mode"; }

// One step of both optimizers on the gradients already in place (stage 3 gathers the
// parameters); every rank's parameters must then be bit-identical to the single-rank optimizer's.
inline void step_both_once(const Model& model, Buffers& distributed, Buffers& single, DistributedOptimizer& optimizer, HybridOptimizer& reference, int stage,
                           const std::string& where) {
  const StepReport report = optimizer.step();
  EXPECT_FALSE(report.skipped) << report.reason;
  if (stage == 3) optimizer.gather_parameters();
  reference.step();
  for (size_t t = 0; t < model.names.size(); ++t)
    EXPECT_EQ(std::memcmp(distributed.data[t].data(), single.data[t].data(), distributed.data[t].size() * 4), 0)
        << model.names[t] << " on rank " << world_communicator->rank() << " (" << where << ")";
}

// Three steps of both optimizers on the same reduced gradients (rank 0 gives them, the others
// zeros, summed without averaging: the reduction is exact); after each, every rank's parameters
// must be bit-identical to the single-rank optimizer's.
inline void step_both_and_compare(const Model& model, Buffers& distributed, Buffers& single, DistributedOptimizer& optimizer, HybridOptimizer& reference,
                           int stage, std::mt19937& random, const std::string& where) {
  Communicator& communicator = *world_communicator;
  for (int step = 0; step < 3; ++step) {
    fill_gradients(single, random);
    for (size_t t = 0; t < model.names.size(); ++t)
      if (communicator.rank() == 0) distributed.grad[t] = single.grad[t];
      else std::fill(distributed.grad[t].begin(), distributed.grad[t].end(), 0.0f);
    step_both_once(model, distributed, single, optimizer, reference, stage, "step " + std::to_string(step) + ", " + where);
  }
}

class Distributed : public ::testing::TestWithParam<std::tuple<int, OrthogonalizationMode>> {};

// Empty when the two f32 arrays are bit-identical, else where they first differ and by how much.
inline std::string bitwise_difference(const float* got, const float* expected, size_t count) {
  size_t first = count, differing = 0;
  double largest = 0;
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(got + i, expected + i, 4) != 0) {
      if (first == count) first = i;
      ++differing;
      largest = std::max(largest, std::fabs(static_cast<double>(got[i]) - expected[i]));
    }
  if (first == count) return "";
  char text[200];
  std::snprintf(text, sizeof text, "%zu of %zu elements differ, first [%zu]: %.9g, expected %.9g; largest difference %.3g", differing, count, first,
                static_cast<double>(got[first]), static_cast<double>(expected[first]), largest);
  return text;
}

inline void expect_same_state(const std::map<std::string, HybridOptimizer::State>& got, const std::map<std::string, HybridOptimizer::State>& expected,
                       const std::string& where) {
  ASSERT_EQ(got.size(), expected.size()) << where;
  for (const auto& [name, values] : expected) {
    const HybridOptimizer::State& mine = got.at(name);
    EXPECT_EQ(bitwise_difference(mine.momentum.data(), values.momentum.data(), values.momentum.size()), "") << name << ".momentum_buffer, " << where;
    EXPECT_EQ(mine.momentum.size(), values.momentum.size()) << name << ", " << where;
    EXPECT_EQ(mine.exp_avg.size(), values.exp_avg.size()) << name << ", " << where;
    EXPECT_EQ(bitwise_difference(mine.exp_avg.data(), values.exp_avg.data(), values.exp_avg.size()), "") << name << ".exp_avg, " << where;
    EXPECT_EQ(bitwise_difference(mine.exp_avg_sq.data(), values.exp_avg_sq.data(), values.exp_avg_sq.size()), "") << name << ".exp_avg_sq, " << where;
    EXPECT_EQ(mine.step, values.step) << name << ".step, " << where;
  }
}

inline void barrier() {
  float nothing = 0;
  world_communicator->all_reduce_sum(&nothing, 1);
}

// One path for every rank: rank 0's process id, so that the ranks of one host share it.
inline std::string shared_path(const std::string& stem) {
  int64_t id = world_communicator->rank() == 0 ? static_cast<int64_t>(getpid()) : 0;
  world_communicator->broadcast(&id, sizeof id, 0);
  return "/tmp/orthojit-distributed-" + stem + "-" + std::to_string(id) + ".safetensors";
}

// Runs every test on every rank with world_communicator set (freed before MPI_Finalize).
inline int run_distributed_tests(int argc, char** argv) {
  return run_tests_on_every_rank(argc, argv, [](int rank) {
    auto communicator = MpiCommunicator::on_world();
    world_communicator = communicator.get();
    if (rank == 0) std::printf("%s\n", communicator->describe().c_str());
    const int result = RUN_ALL_TESTS();
    world_communicator = nullptr;
    return result;
  });
}

}  // namespace distributed_testing
}  // namespace orthojit::runtime
