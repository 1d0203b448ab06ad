// The autotuner's records, winner rules and checks, and the shapes derived from model configs.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "autotune/device_fingerprint.h"
#include "autotune/error_measure.h"
#include "autotune/model_shapes.h"
#include "autotune/record_lookup.h"
#include "autotune/tuner.h"
#include "autotune/tuning_record.h"
#include "kernels/program_library.h"
#include "reference/random_matrix.h"

extern char** environ;

namespace orthojit::autotune {
namespace {

std::string temporary_path(const std::string& name) {
  const auto directory = std::filesystem::temp_directory_path() / ("orthojit-autotune-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  return (directory / name).string();
}

nlohmann::json sample_entry(int index) {
  return {{"program", "p"}, {"rows", index}, {"cols", 2 * index}, {"winner", {{"label", "jit standard"}, {"p50_ms", 1.5 + index}}}};
}

TEST(TuningRecords, RoundTripKeepsEveryEntryAndTheFingerprint) {
  const std::string path = temporary_path("round_trip.json");
  std::filesystem::remove(path);
  const DeviceFingerprint fingerprint = cpu_fingerprint();
  nlohmann::json entries;
  for (int i = 1; i <= 5; ++i) entries["key" + std::to_string(i)] = sample_entry(i);
  merge_into_tuning_file(path, fingerprint, entries, nullptr);
  const LoadedRecords loaded = load_tuning_file(path);
  ASSERT_TRUE(loaded.file.has_value()) << loaded.warning;
  EXPECT_EQ(loaded.file->entries, entries);
  EXPECT_FALSE(fingerprint.mismatch(loaded.file->fingerprint).has_value());
  // Merging more keeps the old entries and replaces a re-tuned one.
  merge_into_tuning_file(path, fingerprint, {{"key2", sample_entry(20)}, {"key9", sample_entry(9)}}, nullptr);
  const LoadedRecords merged = load_tuning_file(path);
  ASSERT_TRUE(merged.file.has_value());
  EXPECT_EQ(merged.file->entries.size(), 6u);
  EXPECT_EQ(merged.file->entries["key2"], sample_entry(20));
  EXPECT_EQ(merged.file->entries["key1"], sample_entry(1));
}

// The child half of TwoWritersInTwoProcessesLoseNothing (run as a separate process).
TEST(TuningRecords, WriterChild) {
  const char* path = std::getenv("ORTHOJIT_TEST_WRITER_FILE");
  const char* id = std::getenv("ORTHOJIT_TEST_WRITER_ID");
  if (!path || !id) GTEST_SKIP() << "only run as a child of TwoWritersInTwoProcessesLoseNothing";
  for (int i = 0; i < 25; ++i) merge_into_tuning_file(path, cpu_fingerprint(), {{std::string(id) + "-" + std::to_string(i), sample_entry(i)}}, nullptr);
}

TEST(TuningRecords, TwoWritersInTwoProcessesLoseNothing) {
  const std::string path = temporary_path("two_writers.json");
  std::filesystem::remove(path);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> children;
  for (const char* id : {"a", "b"}) {
    std::vector<std::string> environment;
    for (char** variable = environ; *variable; ++variable) environment.emplace_back(*variable);
    environment.push_back("ORTHOJIT_TEST_WRITER_FILE=" + path);
    environment.push_back(std::string("ORTHOJIT_TEST_WRITER_ID=") + id);
    std::vector<char*> envp;
    for (auto& variable : environment) envp.push_back(variable.data());
    envp.push_back(nullptr);
    std::string filter = "--gtest_filter=TuningRecords.WriterChild";
    char* argv[] = {const_cast<char*>(self.c_str()), filter.data(), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed";
  }
  const LoadedRecords loaded = load_tuning_file(path);
  ASSERT_TRUE(loaded.file.has_value()) << loaded.warning;
  EXPECT_EQ(loaded.file->entries.size(), 50u) << "a concurrent writer's entries were lost";
}

// Writers in threads of one process (a tuning loop that records from several threads, or two
// tuners in one trainer): each merge opens its own lock descriptor, so flock excludes threads as it
// does processes, and the temporary file (named by the pid, so shared by the threads) is written
// only under the lock. Every thread's entries must survive. ThreadSanitizer runs it too.
TEST(TuningRecords, WritersInSeveralThreadsLoseNothing) {
  constexpr int kThreads = 3, kMerges = 10;
  const std::string path = temporary_path("thread_writers.json");
  std::filesystem::remove(path);
  const DeviceFingerprint fingerprint = cpu_fingerprint();
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([&, t] {
      for (int i = 0; i < kMerges; ++i) {
        try {
          merge_into_tuning_file(path, fingerprint, {{"t" + std::to_string(t) + "-" + std::to_string(i), sample_entry(i)}}, nullptr);
        } catch (const std::exception&) {
          failures.fetch_add(1);
        }
      }
    });
  for (auto& writer : writers) writer.join();
  EXPECT_EQ(failures.load(), 0) << "a merge threw";
  const LoadedRecords loaded = load_tuning_file(path);
  ASSERT_TRUE(loaded.file.has_value()) << loaded.warning;
  EXPECT_EQ(loaded.file->entries.size(), static_cast<size_t>(kThreads * kMerges)) << "a concurrent writer's entries were lost";
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kMerges; ++i) EXPECT_EQ(loaded.file->entries.at("t" + std::to_string(t) + "-" + std::to_string(i)), sample_entry(i));
}

TEST(TuningRecords, CorruptOrTruncatedFileWarnsAndIsRebuilt) {
  const std::string path = temporary_path("corrupt.json");
  const DeviceFingerprint fingerprint = cpu_fingerprint();
  merge_into_tuning_file(path, fingerprint, {{"k", sample_entry(1)}}, nullptr);
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const std::string& broken : {text.substr(0, text.size() / 2), std::string("{\"schema_version\": 0}"), std::string("[{\"entries\": 1}]"),
                                     std::string("")}) {
    {
      std::ofstream out(path, std::ios::trunc | std::ios::binary);
      out << broken;
    }
    const LoadedRecords loaded = load_tuning_file(path);
    EXPECT_FALSE(loaded.file.has_value());
    EXPECT_NE(loaded.warning.find("unusable"), std::string::npos) << loaded.warning;
    std::string warning;
    merge_into_tuning_file(path, fingerprint, {{"fresh", sample_entry(2)}}, &warning);
    EXPECT_NE(warning.find("rebuilt"), std::string::npos);
    const LoadedRecords rebuilt = load_tuning_file(path);
    ASSERT_TRUE(rebuilt.file.has_value());
    EXPECT_EQ(rebuilt.file->entries.size(), 1u);
  }
}

// A file with none of the records' keys is some other file given as --out by mistake (a model
// config, an .npy): refused and left as it was, where it was once replaced with a warning.
TEST(TuningRecords, AFileThatIsNotTuningRecordsIsNotReplaced) {
  const std::string path = temporary_path("not_records.json");
  for (const std::string& foreign : {std::string("{\"hidden_size\": 4096, \"num_hidden_layers\": 32}"), std::string("\x93NUMPY\x01\x00garbage", 16),
                                     std::string("[1, 2]")}) {
    std::ofstream(path, std::ios::trunc | std::ios::binary) << foreign;
    EXPECT_TRUE(load_tuning_file(path).foreign);
    try {
      merge_into_tuning_file(path, cpu_fingerprint(), {{"fresh", sample_entry(3)}}, nullptr);
      ADD_FAILURE() << "a file that is not tuning records was replaced";
    } catch (const std::runtime_error& error) {
      EXPECT_NE(std::string(error.what()).find("is not a tuning-records file"), std::string::npos) << error.what();
    }
    std::ifstream in(path, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), foreign) << "the file changed";
  }
}

// Integer fields that are not integers of int's range (found by tests/fuzz/fuzz_tuning_record:
// a schema of 1.1e88 was converted to int, undefined behaviour) make the file unusable, named.
TEST(TuningRecords, IntegerFieldsOutsideIntAreRefusedByName) {
  nlohmann::json document = {{"schema_version", kTuningSchemaVersion}, {"fingerprint", cpu_fingerprint().to_json()}, {"entries", nlohmann::json::object()}};
  ASSERT_TRUE(parse_tuning_file(document.dump(), "t.json").file.has_value());
  const std::pair<const char*, nlohmann::json> cases[] = {{"schema", 1.1e88}, {"cores", 4294967296LL}, {"cores", 2.5}, {"schema", -3000000000LL}};
  for (const auto& [field, value] : cases) {
    nlohmann::json broken = document;
    broken["fingerprint"][field] = value;
    const LoadedRecords loaded = parse_tuning_file(broken.dump(), "t.json");
    EXPECT_FALSE(loaded.file.has_value()) << field << " = " << value.dump();
    EXPECT_NE(loaded.warning.find(std::string("the fingerprint's ") + field + " is " + value.dump()), std::string::npos) << loaded.warning;
  }
  nlohmann::json broken = document;
  broken["schema_version"] = 1e300;
  EXPECT_NE(parse_tuning_file(broken.dump(), "t.json").warning.find("schema_version is 1e+300, not an integer"), std::string::npos);
}

// A file of a newer schema was written by a newer orthojit: this build cannot read its records
// and must not destroy them (it once rebuilt the file, keeping only the shapes tuned now).
TEST(TuningRecords, ANewerSchemasFileIsNotOverwritten) {
  const std::string path = temporary_path("newer_schema.json");
  nlohmann::json document = {{"schema_version", kTuningSchemaVersion + 1}, {"fingerprint", cpu_fingerprint().to_json()},
                             {"entries", {{"a", sample_entry(1)}, {"b", sample_entry(2)}}}};
  const std::string text = document.dump(2);
  std::ofstream(path, std::ios::trunc) << text;
  const LoadedRecords loaded = load_tuning_file(path);
  EXPECT_FALSE(loaded.file.has_value());
  ASSERT_TRUE(loaded.newer_schema.has_value());
  EXPECT_EQ(*loaded.newer_schema, kTuningSchemaVersion + 1);
  try {
    merge_into_tuning_file(path, cpu_fingerprint(), {{"fresh", sample_entry(3)}}, nullptr);
    ADD_FAILURE() << "a newer schema's file was overwritten";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("newer orthojit"), std::string::npos) << error.what();
  }
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text) << "the file changed";
}

// Asked before tuning: a records path that cannot be written is said up front, not after the
// first shape's minutes of timing.
TEST(TuningRecords, AnUnwritablePathIsNamedBeforeTuning) {
  const std::string file = temporary_path("plain_file");
  std::ofstream(file) << "x";
  const std::string under_file = tuning_path_unwritable_reason(file + "/tuning/cpu.json");
  EXPECT_NE(under_file.find("cannot create the folder"), std::string::npos) << under_file;
  const std::string folder = temporary_path("a_folder");
  std::filesystem::create_directories(folder);
  EXPECT_NE(tuning_path_unwritable_reason(folder).find("is a folder"), std::string::npos);
  const std::string fine = temporary_path("fresh_dir") + "/tuning/cpu.json";
  EXPECT_EQ(tuning_path_unwritable_reason(fine), "");
  EXPECT_TRUE(std::filesystem::is_directory(std::filesystem::path(fine).parent_path()));
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(fine).parent_path())) left.push_back(entry.path().string());
  EXPECT_TRUE(left.empty()) << "the probe file was left behind: " << left.front();
  if (::geteuid() != 0) {  // root writes anywhere
    const std::string locked = temporary_path("read_only_dir");
    std::filesystem::create_directories(locked);
    std::filesystem::permissions(locked, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    EXPECT_NE(tuning_path_unwritable_reason(locked + "/cpu.json").find("cannot create a file"), std::string::npos);
    std::filesystem::permissions(locked, std::filesystem::perms::owner_all);
  }
}

TEST(TuningRecords, AnotherDevicesRecordsAreNotUsedAndNotOverwritten) {
  const std::string path = temporary_path("other_device.json");
  std::filesystem::remove(path);
  DeviceFingerprint other = cpu_fingerprint();
  other.device = "Some Other CPU";
  merge_into_tuning_file(path, other, {{"k", sample_entry(1)}}, nullptr);
  const auto reason = cpu_fingerprint().mismatch(other);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("device differs"), std::string::npos) << *reason;
  EXPECT_THROW(merge_into_tuning_file(path, cpu_fingerprint(), {{"k2", sample_entry(2)}}, nullptr), std::runtime_error);
  EXPECT_EQ(load_tuning_file(path).file->entries.size(), 1u);  // untouched
  // The runtime lookup reports why it does not use them.
  ::setenv("ORTHOJIT_TUNING_FILE", path.c_str(), 1);
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const TunedChoice choice = lookup_tuned(program, 64, 256, 1, std::nullopt);
  EXPECT_FALSE(choice.winner.has_value());
  EXPECT_NE(choice.reason.find("not used"), std::string::npos) << choice.reason;
  EXPECT_NE(describe_tuning_records().find("NOT used"), std::string::npos);
  ::unsetenv("ORTHOJIT_TUNING_FILE");
}

TEST(Tuner, TiesGoToTheEarlierCandidateAndOnlyCorrectOnesWin) {
  // Within 2% of the fastest: the earliest wins.
  EXPECT_EQ(pick_winner({10.0, 9.9, 9.85}, {true, true, true}, 0.02), 0u);
  EXPECT_EQ(pick_winner({10.0, 9.0, 9.1}, {true, true, true}, 0.02), 1u);
  // A wrong (or failed) candidate never wins, however fast.
  EXPECT_EQ(pick_winner({10.0, 1.0}, {true, false}, 0.02), 0u);
  EXPECT_FALSE(pick_winner({1.0, 2.0}, {false, false}, 0.02).has_value());
}

TEST(Tuner, AWrongResultCandidateIsRecordedAndNeverWins) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5_f32");
  TuneProblem problem;
  problem.program = &program;
  problem.program_name = "jordan_ns5_f32";
  problem.rows = 48;
  problem.cols = 200;
  TuneSettings settings;
  settings.budget_seconds = 2;
  // The default candidate (first in order, the tie winner) returns a slightly wrong result.
  const Candidate spoiled = default_candidate(program, problem.rows, problem.cols, std::nullopt, nullptr);
  settings.tamper_output = [&](const Trial& trial, float* output, size_t count, bool full_shape) {
    if (!full_shape && Candidate::from_json(trial.config) == spoiled)
      for (size_t i = 0; i < count; i += 7) output[i] *= 1.01f;
  };
  const nlohmann::json entry = tune_shape(problem, settings);
  const double tile_bound = entry["bench"]["tolerance"]["tile"].get<double>();
  EXPECT_EQ(tile_bound, error_bounds(ScalarType::F32, ScalarType::F32, 200).tile);
  bool found = false;
  for (const auto& candidate : entry["candidates"]) {
    if (Candidate::from_json(candidate["config"]) == spoiled) {
      found = true;
      EXPECT_EQ(candidate["status"], "wrong_result");
      EXPECT_NE(candidate["message"].get<std::string>().find("against the f64 reference"), std::string::npos) << candidate["message"];
      EXPECT_GT(candidate["error"].get<double>(), tile_bound);
    } else if (candidate["status"] != "pruned" && candidate["status"] != "skipped_budget") {
      EXPECT_EQ(candidate["status"], "ok") << candidate.dump();
      EXPECT_LT(candidate["error"].get<double>(), tile_bound);
    }
  }
  EXPECT_TRUE(found);
  ASSERT_FALSE(entry["winner"].is_null());
  EXPECT_NE(Candidate::from_json(entry["winner"]["config"]), spoiled);
}

TEST(Tuner, CandidatesAreCheckedAgainstTheReferenceAndTimed) {
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");  // bf16 policy
  TuneProblem problem;
  problem.program = &program;
  problem.program_name = "jordan_ns5";
  problem.rows = 40;
  problem.cols = 130;
  problem.batch = 3;
  TuneSettings settings;
  settings.budget_seconds = 2;
  const nlohmann::json entry = tune_shape(problem, settings);
  int ok = 0;
  for (const auto& candidate : entry["candidates"]) {
    if (candidate["status"] != "ok") continue;
    ++ok;
    // The largest error per 16x16 tile, relative to the tile's RMS: within the bf16 bound.
    EXPECT_LT(candidate["error"].get<double>(), error_bounds(ScalarType::BF16, ScalarType::F32, 130).tile);
    EXPECT_GT(candidate["p50_ms"].get<double>(), 0);
    EXPECT_LE(candidate["p20_ms"].get<double>(), candidate["p50_ms"].get<double>());
    EXPECT_LE(candidate["p50_ms"].get<double>(), candidate["p80_ms"].get<double>());
  }
  EXPECT_GE(ok, 2);
  EXPECT_EQ(entry["storage"], "bf16");
  EXPECT_FALSE(entry["winner"].is_null());
  // gram is impossible at 40 columns? No: gram needs recognized steps, not a size; both ran.
  EXPECT_EQ(entry["key"], problem_key(program, 130, 40, 3, std::nullopt).key) << "a shape and its transpose share the record";
}

TEST(SearchSpace, PrunesImpossibleAndRedundantCandidatesWithReasons) {
  const SearchSpace& space = search_space("cpu");
  Candidate gram;
  gram.strategy = ir::StrategyKind::Gram;
  auto reason = prune_reason(gram, 64, 256, "step 1 is not an odd polynomial", {});
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("gram is impossible"), std::string::npos);
  // At 32x64 every blocking with KC >= 64 and the same MC/NC rounding is the same kernel.
  Candidate a, b;
  b.kc = 512;
  reason = prune_reason(b, 32, 64, "", {a});
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("same effective configuration"), std::string::npos);
  EXPECT_FALSE(prune_reason(b, 1024, 4096, "", {a}).has_value());
  EXPECT_GE(stage_one_candidates(space).size(), 4u);
  EXPECT_THROW(search_space("tpu"), std::invalid_argument);
  EXPECT_THROW(Candidate::from_json({{"engine", "mkl"}, {"strategy", "standard"}, {"triangular", true}}), std::invalid_argument);
}

// Shapes of the example configurations, worked out by hand from each model's published layout.
nlohmann::json read_example(const std::string& name) {
  std::ifstream in(std::string(ORTHOJIT_SOURCE_DIR) + "/examples/models/" + name);
  return nlohmann::json::parse(in);
}

std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> unique_counts(const ModelShapes& shapes) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> counts;
  for (const auto& shape : unique_muon_shapes(shapes)) counts[{shape.rows, shape.cols, shape.batch}] = shape.count;
  return counts;
}

TEST(ModelShapes, Llama3_8B) {
  const ModelShapes shapes = derive_model_matrices(read_example("llama-3-8b.json"));
  // q, o: 4096x4096; k, v: 1024x4096 (8 KV heads x 128); gate, up: 14336x4096; down: 4096x14336; x32 layers.
  const std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> expected = {{{4096, 4096, 1}, 64}, {{1024, 4096, 1}, 64}, {{4096, 14336, 1}, 96}};
  EXPECT_EQ(unique_counts(shapes), expected);
  EXPECT_EQ(shapes.parameters(true), 32LL * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096));
  EXPECT_EQ(shapes.parameters(false), 2LL * 128256 * 4096);  // embed_tokens and an untied lm_head
}

TEST(ModelShapes, Qwen25_3B) {
  const ModelShapes shapes = derive_model_matrices(read_example("qwen2.5-3b.json"));
  // 16 heads x 128 = 2048; 2 KV heads x 128 = 256; MLP 11008; 36 layers; tied embeddings.
  const std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> expected = {{{2048, 2048, 1}, 72}, {{256, 2048, 1}, 72}, {{2048, 11008, 1}, 108}};
  EXPECT_EQ(unique_counts(shapes), expected);
  EXPECT_EQ(shapes.parameters(false), 151936LL * 2048);  // counted once
}

TEST(ModelShapes, Gpt2SmallAndPerHeadSplit) {
  const ModelShapes shapes = derive_model_matrices(read_example("gpt2-small.json"));
  const std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> expected = {{{768, 2304, 1}, 12}, {{768, 768, 1}, 12}, {{768, 3072, 1}, 24}};
  EXPECT_EQ(unique_counts(shapes), expected);
  ModelShapeOptions per_head;
  per_head.per_head = true;
  const auto split = unique_counts(derive_model_matrices(read_example("gpt2-small.json"), per_head));
  EXPECT_EQ(split.at({64, 768, 36}), 12);  // q, k, v of 12 heads: a batch of 36 blocks of 768x64 per layer
}

TEST(ModelShapes, DeepSeekV2LiteMoeWithMla) {
  const ModelShapes shapes = derive_model_matrices(read_example("deepseek-v2-lite.json"));
  // MLA: q_proj 16x(128+64)=3072 x 2048; kv_a 512+64=576 x 2048; kv_b 16x(128+128)=4096 x 512; o 2048x2048.
  // Layer 0 dense (10944); 26 MoE layers: 64 experts of 1408 (batches), router 64x2048, shared 2x1408=2816.
  const std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> expected = {
      {{2048, 3072, 1}, 27}, {{576, 2048, 1}, 27}, {{512, 4096, 1}, 27}, {{2048, 2048, 1}, 27}, {{2048, 10944, 1}, 3},
      {{64, 2048, 1}, 26},   {{1408, 2048, 64}, 78}, {{2048, 2816, 1}, 78}};
  EXPECT_EQ(unique_counts(shapes), expected);
}

TEST(ModelShapes, MissingKeysAreNamed) {
  try {
    derive_model_matrices({{"hidden_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("vocab_size"), std::string::npos) << error.what();
  }
  EXPECT_THROW(derive_model_matrices({{"n_embd", 64}, {"n_layer", -1}, {"n_head", 4}, {"vocab_size", 10}}), std::invalid_argument);
}

// Fields of the wrong type are refused by name (a null or string tie_word_embeddings, or a string
// in mlp_only_layers, once escaped as nlohmann's type_error: an internal error, exit 1).
TEST(ModelShapes, FieldsOfTheWrongTypeAreNamed) {
  const nlohmann::json llama = {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 100}};
  for (const nlohmann::json& tied : {nlohmann::json("true"), nlohmann::json(1)}) {
    nlohmann::json config = llama;
    config["tie_word_embeddings"] = tied;
    try {
      derive_model_matrices(config);
      ADD_FAILURE() << "tie_word_embeddings = " << tied.dump() << " was accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("\"tie_word_embeddings\" must be true or false"), std::string::npos) << error.what();
    }
  }
  nlohmann::json null_tied = llama;
  null_tied["tie_word_embeddings"] = nullptr;  // as absent
  EXPECT_EQ(derive_model_matrices(null_tied).matrices.size(), derive_model_matrices(llama).matrices.size());
  nlohmann::json moe = llama;
  moe["num_experts"] = 4;
  moe["moe_intermediate_size"] = 32;
  moe["mlp_only_layers"] = {"1"};
  try {
    derive_model_matrices(moe);
    ADD_FAILURE() << "a string in mlp_only_layers was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("\"mlp_only_layers\" must list layer indices"), std::string::npos) << error.what();
  }
}

// Heads that do not split hidden_size (hidden 2, 4 heads: fuzz_model_config's find) are refused
// with both numbers unless head_dim says the size; with head_dim they are fine.
TEST(ModelShapes, HeadsThatDoNotSplitTheHiddenSizeNeedAHeadDim) {
  const nlohmann::json uneven = {{"hidden_size", 2}, {"intermediate_size", 16}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 100}};
  for (const bool per_head : {false, true}) {
    try {
      derive_model_matrices(uneven, ModelShapeOptions{per_head});
      ADD_FAILURE() << "heads of 0 rows were accepted";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find("\"hidden_size\" (2) must be a multiple of \"num_attention_heads\" (4)"), std::string::npos) << error.what();
    }
  }
  nlohmann::json with_head_dim = uneven;
  with_head_dim["head_dim"] = 8;
  for (const ModelMatrix& matrix : derive_model_matrices(with_head_dim, ModelShapeOptions{true}).matrices) {
    EXPECT_GE(matrix.rows, 1) << matrix.name;
    EXPECT_GE(matrix.cols, 1) << matrix.name;
  }
}

}  // namespace
}  // namespace orthojit::autotune
