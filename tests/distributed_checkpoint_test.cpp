// The distributed optimizer's checkpoints, under mpirun with 1 to 4 processes (ctest starts it
// with each), for random models whose layouts force matrices across partition boundaries, every
// ZeRO stage and both orthogonalization modes:
//   * the gathered state (to every rank or to one) is the single-rank optimizer's state bit for
//     bit; the state file, streamed to rank 0 in chunks, is the single-rank optimizer's file byte
//     for byte; a state loaded from the single-rank optimizer (or its state file) continues
//     bit-identically, at another alignment;
//   * a state that does not fit, on one rank or all, is refused on every rank with nothing
//     changed; so is a file that is corrupt (only rank 0 reads it whole), of another model,
//     missing, or not the file rank 0 read; a file that cannot be written (no directory, a write
//     failing midway) throws on every rank and leaves nothing behind.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/muon/safetensors_file.h"
#include "tests/distributed_test_support.h"

namespace orthojit::runtime {
namespace {

using namespace distributed_testing;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Checkpoints are world-size independent: after steps, the gathered state is the single-rank
// optimizer's (whatever each rank holds of it), on every rank; a fresh distributed optimizer
// given the single-rank state (or its state file) continues bit-identically; the distributed
// state file loads into the single-rank optimizer.
TEST_P(Distributed, StateGathersToTheSingleRankStateAndLoadsBack) {
  auto [stage, mode] = GetParam();
  Communicator& communicator = *world_communicator;
  const uint32_t seed = 7000 + 10 * static_cast<uint32_t>(stage) + static_cast<uint32_t>(mode);
  const Model model = random_model(seed);
  Buffers distributed = make_buffers(model, seed + 1), single = make_buffers(model, seed + 1);
  DistributedSettings settings = summed(stage, mode);
  settings.alignment = 2;
  settings.bucket_elements = 3 * communicator.world();
  const std::string where = label(stage, mode) + ", rank " + std::to_string(communicator.rank());
  HybridOptimizer reference(single.parameters(model), optimizer_settings());
  std::mt19937 random(seed + 2);
  {
    DistributedOptimizer optimizer(distributed.parameters(model), optimizer_settings(), settings, communicator);
    step_both_and_compare(model, distributed, single, optimizer, reference, stage, random, label(stage, mode));
    expect_same_state(optimizer.gather_state(), reference.state(), where + ", gathered");
    EXPECT_EQ(optimizer.steps_taken(), reference.steps_taken());
    // To one rank only (the last): the others send their partitions and get nothing.
    const int root = communicator.world() - 1;
    const std::map<std::string, HybridOptimizer::State> at_root = optimizer.gather_state(root);
    if (communicator.rank() == root) expect_same_state(at_root, reference.state(), where + ", gathered to rank " + std::to_string(root));
    else EXPECT_TRUE(at_root.empty()) << where << ": a rank other than the root received the state";
    EXPECT_THROW(optimizer.gather_state(communicator.world()), std::invalid_argument);
    // Its file is the single-rank optimizer's, byte for byte (streamed in chunks of 3 floats
    // that cut through tensors), and loads there as the same state.
    const std::string path = shared_path("save");
    // Rank 0 writes it front to back, so it hashes as it writes and reads nothing back at commit
    // (no "checksum" phase); the other ranks report nothing.
    std::vector<std::string> phases;
    optimizer.save_state(path, {}, [&](const FileProgress& progress) {
      if (phases.empty() || phases.back() != progress.phase) phases.emplace_back(progress.phase);
    });
    if (communicator.rank() == 0) {
      EXPECT_EQ(phases, (std::vector<std::string>{"write", "sync"})) << where << ": the save wrote out of the file's order and read it back";
    } else {
      EXPECT_TRUE(phases.empty()) << where;
    }
    if (communicator.rank() == 0) {
      const std::string expected = path + ".single";
      reference.save_state(expected);
      EXPECT_EQ(file_bytes(path), file_bytes(expected)) << where << ": the streamed state file differs from the single-rank optimizer's";
      std::remove(expected.c_str());
    }
    HybridOptimizer loader(single.parameters(model), optimizer_settings());
    loader.load_state(path);
    expect_same_state(loader.state(), reference.state(), where + ", through the distributed state file");
    EXPECT_EQ(loader.steps_taken(), reference.steps_taken());
    barrier();  // every rank has read it
    if (communicator.rank() == 0) std::remove(path.c_str());
  }
  // A fresh optimizer (another alignment: other boundaries) given the single-rank state.
  settings.alignment = 3;
  {
    DistributedOptimizer resumed(distributed.parameters(model), optimizer_settings(), settings, communicator);
    resumed.load_state(reference.state(), reference.steps_taken());
    expect_same_state(resumed.gather_state(), reference.state(), where + ", loaded then gathered");
    step_both_and_compare(model, distributed, single, resumed, reference, stage, random, label(stage, mode) + ", resumed from the state");
  }
  // And from the single-rank optimizer's file.
  const std::string path = shared_path("load");
  if (communicator.rank() == 0) reference.save_state(path);
  barrier();
  DistributedOptimizer from_file(distributed.parameters(model), optimizer_settings(), settings, communicator);
  from_file.load_state(path);
  barrier();
  if (communicator.rank() == 0) std::remove(path.c_str());
  EXPECT_EQ(from_file.steps_taken(), reference.steps_taken());
  step_both_and_compare(model, distributed, single, from_file, reference, stage, random, label(stage, mode) + ", resumed from the file");
}

// A state that does not fit is refused on every rank, with nothing changed anywhere: wrong on
// every rank (a tensor too short), and wrong on one rank only (the others must not load theirs).
TEST(DistributedState, AStateThatDoesNotFitIsRefusedOnEveryRank) {
  Communicator& communicator = *world_communicator;
  const Model model = random_model(31);
  Buffers buffers = make_buffers(model, 32);
  DistributedSettings settings;
  settings.stage = 2;
  DistributedOptimizer optimizer(buffers.parameters(model), optimizer_settings(), settings, communicator);
  std::mt19937 random(33);
  fill_gradients(buffers, random);
  ASSERT_FALSE(optimizer.step().skipped);
  const std::map<std::string, HybridOptimizer::State> before = optimizer.gather_state();
  std::map<std::string, HybridOptimizer::State> changed = before;
  for (auto& [name, values] : changed) {
    for (float& v : values.momentum) v += 1.0f;
    for (float& v : values.exp_avg) v += 1.0f;
    if (values.momentum.empty()) values.step += 5;  // AdamW only: Muon keeps no step count
  }
  const int last = communicator.world() - 1;
  for (int wrong_on : {-1, last}) {  // -1: every rank
    std::map<std::string, HybridOptimizer::State> given = changed;
    if (wrong_on < 0 || communicator.rank() == wrong_on) {
      HybridOptimizer::State& first = given.begin()->second;
      (first.momentum.empty() ? first.exp_avg : first.momentum).pop_back();
    }
    try {
      optimizer.load_state(given, 9);
      ADD_FAILURE() << "a state that does not fit was loaded (wrong on " << (wrong_on < 0 ? std::string("every rank") : "rank " + std::to_string(wrong_on)) << ")";
    } catch (const std::runtime_error& error) {
      const std::string message = error.what();
      const bool mine = wrong_on < 0 || communicator.rank() == wrong_on;
      EXPECT_NE(message.find(mine ? "does not match this optimizer" : "failed on 1 other rank(s)"), std::string::npos) << message;
    }
    expect_same_state(optimizer.gather_state(), before, "after a refused load, rank " + std::to_string(communicator.rank()));
    EXPECT_EQ(optimizer.steps_taken(), 1);
  }
  // A state for a parameter this optimizer does not have.
  std::map<std::string, HybridOptimizer::State> extra = changed;
  extra["not.a.parameter"] = extra.begin()->second;
  EXPECT_THROW(optimizer.load_state(extra, 1), std::runtime_error);
  // What does fit loads.
  optimizer.load_state(changed, 9);
  expect_same_state(optimizer.gather_state(), changed, "after a load, rank " + std::to_string(communicator.rank()));
  EXPECT_EQ(optimizer.steps_taken(), 9);
}

// A state file that cannot be read as this optimizer's state is refused on every rank with
// nothing changed: one flipped data byte (found by rank 0's checksum over the whole file, the
// other ranks reading only their parts), another model's file, no file at all. A file that cannot
// be written (no such directory) throws on every rank and leaves nothing; the ranks stay in step.
TEST(DistributedState, AFileThatCannotBeUsedIsRefusedOnEveryRank) {
  Communicator& communicator = *world_communicator;
  const Model model = random_model(51);
  Buffers buffers = make_buffers(model, 52);
  DistributedSettings settings;
  settings.stage = 3;
  settings.bucket_elements = 5 * communicator.world();
  DistributedOptimizer optimizer(buffers.parameters(model), optimizer_settings(), settings, communicator);
  std::mt19937 random(53);
  fill_gradients(buffers, random);
  ASSERT_FALSE(optimizer.step().skipped);
  const std::map<std::string, HybridOptimizer::State> before = optimizer.gather_state();
  const std::string where = "rank " + std::to_string(communicator.rank());
  const std::string path = shared_path("refused");
  optimizer.save_state(path);

  auto refused = [&](const std::string& file, const std::string& own_reason, const std::string& what) {
    try {
      optimizer.load_state(file);
      ADD_FAILURE() << what << " was loaded on " << where;
    } catch (const std::runtime_error& error) {
      const std::string message = error.what();
      EXPECT_TRUE(message.find(own_reason) != std::string::npos || message.find("other rank(s)") != std::string::npos) << what << ", " << where << ": " << message;
      if (communicator.rank() == 0) {
        EXPECT_NE(message.find(own_reason), std::string::npos) << what << ": " << message;
      }
    }
    expect_same_state(optimizer.gather_state(), before, "after refusing " + what + ", " + where);
    EXPECT_EQ(optimizer.steps_taken(), 1) << what;
  };

  // One flipped bit in the middle of a momentum buffer's data (the last one of 8 bytes or more).
  if (communicator.rank() == 0) {
    const SafetensorsReader reader(path);
    const TensorPlace* momentum = nullptr;
    for (const TensorPlace& tensor : reader.header().tensors)
      if (tensor.name.find(".momentum_buffer") != std::string::npos && tensor.end - tensor.begin >= 8) momentum = &tensor;
    ASSERT_NE(momentum, nullptr);
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    const auto at = static_cast<std::streamoff>(reader.header().data_start + (momentum->begin + momentum->end) / 2);
    file.seekg(at);
    const char byte = static_cast<char>(file.get() ^ 0x01);
    file.seekp(at);
    file.put(byte);
  }
  barrier();
  refused(path, "the data is corrupt", "a file with one flipped bit");

  // A wrapper's own refusal on the last rank only (orthojit.DistributedMuon's param_groups checks):
  // that rank reads nothing but joins the collectives, and every rank refuses.
  optimizer.save_state(path);
  {
    const bool last = communicator.rank() == communicator.world() - 1;
    try {
      optimizer.load_state(path, last ? "the wrapper refused" : "");
      ADD_FAILURE() << "a file refused on the last rank was loaded, " << where;
    } catch (const std::exception& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(last ? "the wrapper refused" : "failed on 1 other rank(s)"), std::string::npos) << message;
    }
    expect_same_state(optimizer.gather_state(), before, "after a wrapper's refusal, " + where);
  }

  // Another model's file.
  const Model other = random_model(61);
  Buffers other_buffers = make_buffers(other, 62);
  DistributedOptimizer stranger(other_buffers.parameters(other), optimizer_settings(), settings, communicator);
  stranger.save_state(path);
  refused(path, "does not match the parameters", "another model's file");

  // Another file of this model on the last rank only (a file replaced while the ranks open it):
  // that rank finds it is not the file rank 0 checked, and every rank refuses.
  if (communicator.world() > 1) {
    const std::string other_path = path + ".older";
    optimizer.save_state(path);
    fill_gradients(buffers, random);
    DistributedOptimizer later(buffers.parameters(model), optimizer_settings(), settings, communicator);
    later.step();
    later.save_state(other_path);
    try {
      optimizer.load_state(communicator.rank() == communicator.world() - 1 ? other_path : path);
      ADD_FAILURE() << "ranks that read different files loaded them, " << where;
    } catch (const std::runtime_error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(communicator.rank() == communicator.world() - 1 ? "read another file than rank 0" : "failed on 1 other rank(s)"), std::string::npos)
          << message;
    }
    expect_same_state(optimizer.gather_state(), before, "after refusing different files, " + where);
    barrier();
    if (communicator.rank() == 0) std::remove(other_path.c_str());
  }

  if (communicator.rank() == 0) std::remove(path.c_str());
  barrier();
  refused(path, "cannot open for reading", "a missing file");

  // A directory that does not exist: rank 0 cannot write, every rank throws, nothing is left.
  const std::string nowhere = "/tmp/orthojit-no-such-directory-" + std::to_string(::getpid()) + "/state.safetensors";
  try {
    optimizer.save_state(nowhere);
    ADD_FAILURE() << "a state was saved into a missing directory, " << where;
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    if (communicator.rank() == 0) EXPECT_NE(message.find("cannot create a temporary file next to it"), std::string::npos) << message;
    else EXPECT_NE(message.find("failed on 1 other rank(s)"), std::string::npos) << message;
  }
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(nowhere).parent_path()));
  // A write that fails midway on rank 0 (the file size limit, as a full disk would: EFBIG once
  // the data passes 64 bytes): the chunks still flow, every rank throws, no temporary is left.
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  auto leftovers = [&] {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(folder))
      if (entry.path().filename().string().rfind(std::filesystem::path(path).filename().string() + ".tmp", 0) == 0) ++count;
    return count;
  };
  rlimit limit{};
  ::getrlimit(RLIMIT_FSIZE, &limit);
  if (communicator.rank() == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = limit;
    small.rlim_cur = 64;
    ::setrlimit(RLIMIT_FSIZE, &small);
  }
  try {
    optimizer.save_state(path);
    ADD_FAILURE() << "a write past the file size limit succeeded, " << where;
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(communicator.rank() == 0 ? "cannot write" : "failed on 1 other rank(s)"), std::string::npos) << message;
  }
  if (communicator.rank() == 0) {
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::signal(SIGXFSZ, SIG_DFL);
    EXPECT_EQ(leftovers(), 0) << "a temporary file was left behind";
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  // Still in step: the same state saves and loads.
  optimizer.save_state(path);
  optimizer.load_state(path);
  expect_same_state(optimizer.gather_state(), before, "after a save and a load, " + where);
  barrier();
  if (communicator.rank() == 0) std::remove(path.c_str());
}

// A wrapper's own record (orthojit.DistributedMuon's param_groups) joins the file's metadata, and
// the file still loads; a key of the state file's own is refused on every rank, nothing written.
TEST(DistributedState, ExtraMetadataJoinsTheFile) {
  Communicator& communicator = *world_communicator;
  const Model model = random_model(71);
  Buffers buffers = make_buffers(model, 72);
  DistributedOptimizer optimizer(buffers.parameters(model), optimizer_settings(), DistributedSettings{}, communicator);
  const std::string path = shared_path("extra");
  optimizer.save_state(path, {{"wrapper.groups", "[{\"lr\": 0.02}]"}});
  if (communicator.rank() == 0) {
    const SafetensorsReader reader(path);
    EXPECT_EQ(reader.header().metadata.at("wrapper.groups"), "[{\"lr\": 0.02}]");
    EXPECT_EQ(reader.header().metadata.at("orthojit.format"), "hybrid-optimizer-state/2");
  }
  optimizer.load_state(path);
  barrier();
  if (communicator.rank() == 0) std::remove(path.c_str());
  barrier();
  for (const char* reserved : {"orthojit.steps_taken", "orthojit.sha256"}) {
    try {
      optimizer.save_state(path, {{reserved, "7"}});
      ADD_FAILURE() << reserved << " was accepted";
    } catch (const std::exception& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(communicator.rank() == 0 ? "is the state file's own" : "failed on 1 other rank(s)"), std::string::npos) << message;
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << reserved;
  }
}

INSTANTIATE_TEST_SUITE_P(StagesAndModes, Distributed,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(OrthogonalizationMode::DeepSpeed, OrthogonalizationMode::Balanced)));

}  // namespace
}  // namespace orthojit::runtime

int main(int argc, char** argv) { return orthojit::runtime::distributed_testing::run_distributed_tests(argc, argv); }
