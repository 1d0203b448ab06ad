// The CUDA program cache without a GPU (NVRTC compiles for sm_80 anyway): memory, disk and
// compile layers; the key; damaged files are misses that get rewritten; failures are not
// cached; an unwritable directory only warns; the LRU size bound; concurrent writers.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/nvrtc_compiler.h"
#include "cuda/program_cache.h"

namespace orthojit::cuda {
namespace {

namespace fs = std::filesystem;
using Source = ProgramCache::Result::Source;

constexpr int64_t kUnbounded = int64_t{1} << 40;
const std::string kArch = "sm_80";

// Small real kernels; `factor` makes each a different program (and so a different key).
std::string kernel_source(int factor) {
  return "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= " + std::to_string(factor) + ".0f; }\n";
}

const char* to_string(Source source) {
  switch (source) {
    case Source::Memory: return "Memory";
    case Source::Disk: return "Disk";
    case Source::Compiled: return "Compiled";
  }
  return "?";
}

// ptxas's log ends with "Compile time = 1.160 ms", which differs between two compiles of the
// same program.
std::string without_timings(const std::string& log) {
  std::istringstream in(log);
  std::string line, kept;
  while (std::getline(in, line))
    if (line.find("Compile time") == std::string::npos) kept += line + "\n";
  return kept;
}

// `expected` is the very output stored (Exact) or another compile of the same program
// (IgnoringTimes).
enum class LogCheck { Exact, IgnoringTimes };

void expect_same_output(const NvrtcOutput& actual, const NvrtcOutput& expected, LogCheck log_check = LogCheck::Exact) {
  EXPECT_EQ(actual.arch, expected.arch);
  EXPECT_EQ(actual.image, expected.image);
  if (log_check == LogCheck::Exact) EXPECT_EQ(actual.log, expected.log);
  else EXPECT_EQ(without_timings(actual.log), without_timings(expected.log));
  EXPECT_FALSE(actual.log.empty());
  EXPECT_EQ(actual.options, expected.options);
  ASSERT_EQ(actual.resources.size(), expected.resources.size());
  for (const auto& [kernel, resources] : expected.resources) {
    auto found = actual.resources.find(kernel);
    ASSERT_NE(found, actual.resources.end()) << kernel;
    EXPECT_EQ(found->second.registers, resources.registers) << kernel;
    EXPECT_EQ(found->second.spill_store_bytes, resources.spill_store_bytes) << kernel;
    EXPECT_EQ(found->second.spill_load_bytes, resources.spill_load_bytes) << kernel;
    EXPECT_EQ(found->second.stack_bytes, resources.stack_bytes) << kernel;
    EXPECT_EQ(found->second.shared_bytes, resources.shared_bytes) << kernel;
  }
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Names of the files in `directory` that are not finished cache files (temporaries).
std::vector<std::string> leftover_files(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != kProgramCacheExtension) names.push_back(name);
  }
  return names;
}

int count_cache_files(const fs::path& directory) {
  if (!fs::exists(directory)) return 0;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(directory)) count += entry.path().extension() == kProgramCacheExtension ? 1 : 0;
  return count;
}

// A fresh, empty directory per test, removed afterwards.
class ProgramCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ = fs::temp_directory_path() / ("orthojit-program-cache-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }

  fs::path file_of(int factor) const { return directory_ / (program_cache_key(kernel_source(factor), {}, kArch) + kProgramCacheExtension); }

  fs::path directory_;
};

TEST(ProgramCacheKey, IsAStableSha256HexDigest) {
  const NamedSources headers = {{"helpers.cuh", "#define TWO 2.0f\n"}};
  const std::string key = program_cache_key(kernel_source(2), headers, kArch);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos) << key;
  EXPECT_EQ(program_cache_key(kernel_source(2), headers, kArch), key);
  EXPECT_EQ(program_cache_key(kernel_source(2), headers, kArch, {}), key);
}

TEST(ProgramCacheKey, ChangesWithEveryInput) {
  const NamedSources headers = {{"helpers.cuh", "#define TWO 2.0f\n"}};
  const std::string key = program_cache_key(kernel_source(2), headers, kArch);
  EXPECT_NE(program_cache_key(kernel_source(3), headers, kArch), key) << "source";
  EXPECT_NE(program_cache_key(kernel_source(2) + " ", headers, kArch), key) << "one more space in the source";
  EXPECT_NE(program_cache_key(kernel_source(2), {{"helpers.cuh", "#define TWO 2.0\n"}}, kArch), key) << "header text";
  EXPECT_NE(program_cache_key(kernel_source(2), {{"other.cuh", "#define TWO 2.0f\n"}}, kArch), key) << "header name";
  EXPECT_NE(program_cache_key(kernel_source(2), {}, kArch), key) << "no header";
  EXPECT_NE(program_cache_key(kernel_source(2), headers, "sm_90"), key) << "arch";
  EXPECT_NE(program_cache_key(kernel_source(2), headers, "compute_80"), key) << "PTX instead of cubin";
  EXPECT_NE(program_cache_key(kernel_source(2), headers, kArch, {"-lineinfo"}), key) << "options";
  // Fields are delimited: moving text across a boundary between name and text changes the key.
  EXPECT_NE(program_cache_key("x", {{"ab", "c"}}, kArch), program_cache_key("x", {{"a", "bc"}}, kArch));
  EXPECT_NE(program_cache_key("x", {{"a", "b"}, {"c", "d"}}, kArch), program_cache_key("x", {{"c", "d"}, {"a", "b"}}, kArch)) << "header order";
}

TEST(ProgramCacheFile, RoundTripsTheWholeOutputAndRejectsAnotherKeyOrArch) {
  NvrtcOutput output;
  output.arch = kArch;
  output.image = {'\0', '\x7f', '\xff', 'c', 'u', 'b', 'i', 'n', '\0'};
  output.log = "ptxas info    : Used 12 registers\n";
  output.resources["gemm"] = KernelResources{40, 8, 4, 16, 4096, {}};
  output.resources["norm"] = KernelResources{12, 0, 0, 0, 0, {}};
  output.options = canonical_options(kArch);
  const std::string key = program_cache_key("source", {}, kArch);
  const std::string bytes = serialize_program_file(key, output);
  std::optional<NvrtcOutput> loaded = deserialize_program_file(bytes, key, kArch);
  ASSERT_TRUE(loaded);
  expect_same_output(*loaded, output);
  EXPECT_FALSE(deserialize_program_file(bytes, program_cache_key("other source", {}, kArch), kArch)) << "another key";
  EXPECT_FALSE(deserialize_program_file(bytes, key, "sm_90")) << "another arch";
  EXPECT_FALSE(deserialize_program_file(bytes + "x", key, kArch)) << "a byte appended";
  EXPECT_FALSE(deserialize_program_file(bytes.substr(0, bytes.size() - 1), key, kArch)) << "a byte missing";
  EXPECT_FALSE(deserialize_program_file("", key, kArch)) << "empty";
  // Every single flipped byte is caught (by the magic, a field check or the checksum).
  for (size_t position = 0; position < bytes.size(); ++position) {
    std::string damaged = bytes;
    damaged[position] = static_cast<char>(damaged[position] ^ 0x01);
    EXPECT_FALSE(deserialize_program_file(damaged, key, kArch)) << "byte " << position << " flipped";
  }
}

TEST_F(ProgramCacheTest, CompilesThenHitsMemoryThenDiskInANewCache) {
  ProgramCache cache(directory_, kUnbounded);
  const ProgramCache::Result compiled = cache.get_or_compile(kernel_source(2), {}, kArch);
  EXPECT_EQ(compiled.source, Source::Compiled) << to_string(compiled.source);
  EXPECT_GT(compiled.compile_seconds, 0);
  ASSERT_FALSE(compiled.output.image.empty());
  ASSERT_EQ(compiled.output.resources.count("k"), 1u) << compiled.output.log;
  EXPECT_GT(compiled.output.resources.at("k").registers, 0);
  EXPECT_TRUE(fs::is_regular_file(file_of(2)));
  EXPECT_TRUE(leftover_files(directory_).empty());

  const ProgramCache::Result memory = cache.get_or_compile(kernel_source(2), {}, kArch);
  EXPECT_EQ(memory.source, Source::Memory) << to_string(memory.source);
  EXPECT_EQ(memory.compile_seconds, 0);
  expect_same_output(memory.output, compiled.output);

  // Another context (a new cache object) finds the file; the ptxas report comes back too.
  ProgramCache other(directory_, kUnbounded);
  const ProgramCache::Result disk = other.get_or_compile(kernel_source(2), {}, kArch);
  EXPECT_EQ(disk.source, Source::Disk) << to_string(disk.source);
  EXPECT_EQ(disk.compile_seconds, 0);
  expect_same_output(disk.output, compiled.output);
  EXPECT_EQ(other.get_or_compile(kernel_source(2), {}, kArch).source, Source::Memory);

  // A different program is not confused with the cached one.
  const ProgramCache::Result different = other.get_or_compile(kernel_source(3), {}, kArch);
  EXPECT_EQ(different.source, Source::Compiled);
  EXPECT_NE(different.output.image, compiled.output.image);
  EXPECT_EQ(count_cache_files(directory_), 2);
}

TEST_F(ProgramCacheTest, HeadersAreCompiledAndKeyed) {
  const std::string source = "#include \"factor.cuh\"\nextern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= FACTOR; }\n";
  ProgramCache cache(directory_, kUnbounded);
  const auto two = cache.get_or_compile(source, {{"factor.cuh", "#define FACTOR 2.0f\n"}}, kArch);
  const auto three = cache.get_or_compile(source, {{"factor.cuh", "#define FACTOR 3.0f\n"}}, kArch);
  EXPECT_EQ(two.source, Source::Compiled);
  EXPECT_EQ(three.source, Source::Compiled) << "a changed header must not hit the entry of the old one";
  EXPECT_NE(two.output.image, three.output.image);
  EXPECT_EQ(count_cache_files(directory_), 2);
}

// Damages the cache file of kernel 2 with `damage`, then checks that a new cache compiles it
// again (never returns the damaged bytes) and rewrites a good file that the next cache loads.
void expect_damage_is_a_miss(const fs::path& directory, const fs::path& file, const std::function<void(const fs::path&)>& damage) {
  const NvrtcOutput reference = compile_cuda(kernel_source(2), {}, kArch);
  {
    ProgramCache cache(directory, kUnbounded);
    ASSERT_EQ(cache.get_or_compile(kernel_source(2), {}, kArch).source, Source::Compiled);
  }
  ASSERT_TRUE(fs::is_regular_file(file));
  damage(file);
  {
    ProgramCache cache(directory, kUnbounded);
    const ProgramCache::Result result = cache.get_or_compile(kernel_source(2), {}, kArch);
    EXPECT_EQ(result.source, Source::Compiled) << to_string(result.source);
    EXPECT_EQ(result.output.image, reference.image);
  }
  ProgramCache cache(directory, kUnbounded);
  const ProgramCache::Result result = cache.get_or_compile(kernel_source(2), {}, kArch);
  EXPECT_EQ(result.source, Source::Disk) << "the damaged file was not rewritten";
  expect_same_output(result.output, reference, LogCheck::IgnoringTimes);
  EXPECT_TRUE(leftover_files(directory).empty());
}

TEST_F(ProgramCacheTest, FlippedPayloadByteIsAMissAndTheFileIsRewritten) {
  expect_damage_is_a_miss(directory_, file_of(2), [](const fs::path& file) {
    std::string bytes = read_bytes(file);
    // The middle of the file is inside the payload's image (the image is most of the file).
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x20);
    write_bytes(file, bytes);
  });
}

TEST_F(ProgramCacheTest, FlippedLastByteIsAMissAndTheFileIsRewritten) {
  expect_damage_is_a_miss(directory_, file_of(2), [](const fs::path& file) {
    std::string bytes = read_bytes(file);
    bytes.back() = static_cast<char>(bytes.back() ^ 0x01);  // in the last option's text: only the checksum sees it
    write_bytes(file, bytes);
  });
}

TEST_F(ProgramCacheTest, TruncatedFileIsAMissAndTheFileIsRewritten) {
  expect_damage_is_a_miss(directory_, file_of(2), [](const fs::path& file) { fs::resize_file(file, fs::file_size(file) / 2); });
}

TEST_F(ProgramCacheTest, EmptyFileIsAMissAndTheFileIsRewritten) {
  expect_damage_is_a_miss(directory_, file_of(2), [](const fs::path& file) { fs::resize_file(file, 0); });
}

TEST_F(ProgramCacheTest, GarbageFileIsAMissAndTheFileIsRewritten) {
  expect_damage_is_a_miss(directory_, file_of(2), [](const fs::path& file) { write_bytes(file, "this is not a cache file\n" + std::string(4096, '\xab')); });
}

TEST_F(ProgramCacheTest, FileOfAnotherKeyIsAMissAndTheFileIsRewritten) {
  // A whole, checksummed file, but of another program (e.g. a copy under the wrong name).
  const fs::path other = file_of(3);
  {
    ProgramCache cache(directory_, kUnbounded);
    cache.get_or_compile(kernel_source(3), {}, kArch);
  }
  expect_damage_is_a_miss(directory_, file_of(2), [&](const fs::path& file) { fs::copy_file(other, file, fs::copy_options::overwrite_existing); });
}

TEST_F(ProgramCacheTest, CompileErrorThrowsAndIsNotCached) {
  const std::string broken = "extern \"C\" __global__ void k() {\n  int x = ;\n}\n";
  ProgramCache cache(directory_, kUnbounded);
  EXPECT_THROW(cache.get_or_compile(broken, {}, kArch), CudaCompileError);
  EXPECT_EQ(count_cache_files(directory_), 0);
  EXPECT_TRUE(leftover_files(directory_).empty());
  // Not remembered in memory either: the next call compiles (and fails) again.
  EXPECT_THROW(cache.get_or_compile(broken, {}, kArch), CudaCompileError);
  // The cache still works after a failure.
  EXPECT_EQ(cache.get_or_compile(kernel_source(2), {}, kArch).source, Source::Compiled);
  EXPECT_EQ(count_cache_files(directory_), 1);
}

TEST_F(ProgramCacheTest, UnwritableDirectoryWarnsOnceAndKeepsProgramsInMemory) {
  // A path below a regular file can never be created (not even by root, unlike chmod 0).
  write_bytes(directory_ / "blocker", "a file, not a directory");
  ProgramCache cache(directory_ / "blocker" / "cuda", kUnbounded);
  ::testing::internal::CaptureStderr();
  const auto first = cache.get_or_compile(kernel_source(2), {}, kArch);
  const auto second = cache.get_or_compile(kernel_source(3), {}, kArch);
  const auto again = cache.get_or_compile(kernel_source(2), {}, kArch);
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(first.source, Source::Compiled);
  EXPECT_FALSE(first.output.image.empty());
  EXPECT_EQ(second.source, Source::Compiled);
  EXPECT_EQ(again.source, Source::Memory);
  const std::string message = "cannot write the CUDA program cache";
  const size_t found = warnings.find(message);
  ASSERT_NE(found, std::string::npos) << warnings;
  EXPECT_EQ(warnings.find(message, found + 1), std::string::npos) << "warned more than once:\n" << warnings;
  EXPECT_NE(warnings.find("blocker"), std::string::npos) << "the warning names the directory:\n" << warnings;
}

TEST_F(ProgramCacheTest, EmptyDirectoryMeansMemoryOnly) {
  ProgramCache cache("", kUnbounded);
  EXPECT_FALSE(cache.disk_enabled());
  EXPECT_EQ(cache.get_or_compile(kernel_source(2), {}, kArch).source, Source::Compiled);
  EXPECT_EQ(cache.get_or_compile(kernel_source(2), {}, kArch).source, Source::Memory);
  ProgramCache other("", kUnbounded);
  EXPECT_EQ(other.get_or_compile(kernel_source(2), {}, kArch).source, Source::Compiled);
}

TEST_F(ProgramCacheTest, SizeBoundEvictsTheLeastRecentlyUsed) {
  // The sizes of the three files, so that the bound can sit between two and three files. Not
  // exactly between: a file's size moves by a byte or two from one compile of the same source to
  // the next (the stored ptxas log says "Compile time = 9.870 ms" or "10.230 ms"), so the bound is
  // half of B below the three (ASan runs once missed a bound of the sum less one byte).
  const fs::path sizing = directory_ / "sizing";
  int64_t size_c = 0;
  {
    ProgramCache cache(sizing, kUnbounded);
    cache.get_or_compile(kernel_source(4), {}, kArch);
    size_c = static_cast<int64_t>(fs::file_size(sizing / file_of(4).filename()));
  }
  const fs::path directory = directory_ / "cuda";
  const auto path_of = [&](int factor) { return directory / file_of(factor).filename(); };
  {
    ProgramCache cache(directory, kUnbounded);
    cache.get_or_compile(kernel_source(2), {}, kArch);  // A
    cache.get_or_compile(kernel_source(3), {}, kArch);  // B
  }
  const int64_t size_a = static_cast<int64_t>(fs::file_size(path_of(2)));
  const int64_t size_b = static_cast<int64_t>(fs::file_size(path_of(3)));
  // A was written first and B later; then A is used (a disk hit), so B is the least recently used.
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(path_of(2), now - std::chrono::hours(2));
  fs::last_write_time(path_of(3), now - std::chrono::hours(1));

  ProgramCache cache(directory, size_a + size_b / 2 + size_c);
  ASSERT_EQ(cache.get_or_compile(kernel_source(2), {}, kArch).source, Source::Disk);
  EXPECT_GT(fs::last_write_time(path_of(2)), now - std::chrono::minutes(1)) << "a hit refreshes the file's mtime";
  ASSERT_EQ(cache.get_or_compile(kernel_source(4), {}, kArch).source, Source::Compiled);  // C: over the bound
  EXPECT_TRUE(fs::exists(path_of(2))) << "A was used recently";
  EXPECT_FALSE(fs::exists(path_of(3))) << "B is the least recently used";
  EXPECT_TRUE(fs::exists(path_of(4))) << "C was just written";
  EXPECT_EQ(count_cache_files(directory), 2) << "one eviction brings it under the bound";
}

TEST_F(ProgramCacheTest, SizeBoundKeepsTheFileJustWritten) {
  {
    ProgramCache cache(directory_, kUnbounded);
    cache.get_or_compile(kernel_source(2), {}, kArch);
    cache.get_or_compile(kernel_source(3), {}, kArch);
  }
  // Make the newest file also the one with the oldest mtime: it must still be kept.
  ProgramCache cache(directory_, 1);
  ASSERT_EQ(cache.get_or_compile(kernel_source(4), {}, kArch).source, Source::Compiled);
  EXPECT_FALSE(fs::exists(file_of(2)));
  EXPECT_FALSE(fs::exists(file_of(3)));
  EXPECT_TRUE(fs::exists(file_of(4)));
  ProgramCache other(directory_, 1);
  EXPECT_EQ(other.get_or_compile(kernel_source(4), {}, kArch).source, Source::Disk);
}

TEST_F(ProgramCacheTest, StrayTemporaryFilesOlderThanAnHourAreRemoved) {
  const auto now = fs::file_time_type::clock::now();
  const fs::path stale = directory_ / ("0123abcd" + std::string(kProgramCacheExtension) + ".tmp.1.2.3");
  const fs::path fresh = directory_ / ("4567abcd" + std::string(kProgramCacheExtension) + ".tmp.1.2.4");
  const fs::path unrelated = directory_ / "notes.txt";
  for (const auto& path : {stale, fresh, unrelated}) write_bytes(path, "partial");
  fs::last_write_time(stale, now - std::chrono::hours(2));
  fs::last_write_time(unrelated, now - std::chrono::hours(2));
  ProgramCache cache(directory_, kUnbounded);
  cache.get_or_compile(kernel_source(2), {}, kArch);
  EXPECT_FALSE(fs::exists(stale)) << "a writer that died two hours ago";
  EXPECT_TRUE(fs::exists(fresh)) << "may belong to a writer at work";
  EXPECT_TRUE(fs::exists(unrelated)) << "not the cache's file";
}

TEST_F(ProgramCacheTest, AtomicWritesNeverShowAPartOrAMixOfFiles) {
  // Writer threads replace one file with files of one repeated byte each while a reader checks
  // that every read sees one whole file: a direct (non-atomic) write shows a short file, a
  // temporary name shared between threads a mix of two files or a failed rename.
  constexpr int kWriters = 4, kWritesEach = 40;
  constexpr size_t kSize = 256 * 1024;
  const fs::path target = directory_ / ("0123abcd" + std::string(kProgramCacheExtension));
  std::atomic<int> writers_left{kWriters}, failed_writes{0}, torn_reads{0}, whole_reads{0};
  std::vector<std::thread> threads;
  for (int writer = 0; writer < kWriters; ++writer) {
    threads.emplace_back([&, writer] {
      for (int write = 0; write < kWritesEach; ++write) {
        const std::string bytes(kSize, static_cast<char>('A' + (writer * kWritesEach + write) % 50));
        std::string error;
        if (!write_file_atomically(target, bytes, error)) {
          ++failed_writes;
          ADD_FAILURE() << error;
        }
      }
      --writers_left;
    });
  }
  threads.emplace_back([&] {
    while (writers_left > 0) {
      // Before the first rename there is no file; once there is one, a rename only ever replaces
      // it, so from then on every read must open a whole file. (Checking existence after a failed
      // read would race with the first rename.)
      if (!fs::exists(target)) continue;
      const std::string bytes = read_bytes(target);
      const bool whole = bytes.size() == kSize && bytes.find_first_not_of(bytes[0]) == std::string::npos;
      ++(whole ? whole_reads : torn_reads);
    }
  });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failed_writes, 0);
  EXPECT_EQ(torn_reads, 0) << "of " << (torn_reads + whole_reads) << " reads";
  EXPECT_EQ(fs::file_size(target), kSize);
  EXPECT_TRUE(leftover_files(directory_).empty());

  std::string error;
  EXPECT_FALSE(write_file_atomically(directory_ / "missing" / "file", "x", error));
  EXPECT_NE(error.find("missing"), std::string::npos) << error;
}

TEST_F(ProgramCacheTest, ConcurrentThreadsShareOneCacheAndWriteTheSameKey) {
  const NvrtcOutput reference = compile_cuda(kernel_source(2), {}, kArch);
  constexpr int kThreads = 6;
  ProgramCache shared(directory_, kUnbounded);
  std::vector<ProgramCache::Result> results(kThreads);
  std::vector<std::thread> threads;
  for (int index = 0; index < kThreads; ++index) {
    threads.emplace_back([&, index] {
      // Half the threads share one cache object; the others each have their own (other contexts).
      if (index % 2 == 0) {
        results[static_cast<size_t>(index)] = shared.get_or_compile(kernel_source(2), {}, kArch);
      } else {
        ProgramCache own(directory_, kUnbounded);
        results[static_cast<size_t>(index)] = own.get_or_compile(kernel_source(2), {}, kArch);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) EXPECT_EQ(result.output.image, reference.image) << to_string(result.source);
  EXPECT_EQ(count_cache_files(directory_), 1);
  EXPECT_TRUE(leftover_files(directory_).empty());
  ProgramCache after(directory_, kUnbounded);
  const ProgramCache::Result loaded = after.get_or_compile(kernel_source(2), {}, kArch);
  EXPECT_EQ(loaded.source, Source::Disk);
  expect_same_output(loaded.output, reference, LogCheck::IgnoringTimes);
}

TEST_F(ProgramCacheTest, TwoProcessesWritingTheSameKeyLeaveOneWholeFile) {
  const NvrtcOutput reference = compile_cuda(kernel_source(2), {}, kArch);
  const fs::path go = directory_ / "go";
  const fs::path directory = directory_ / "cuda";
  std::vector<pid_t> children;
  for (int child = 0; child < 2; ++child) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      // The child does only this and leaves with _exit (no gtest teardown, no atexit handlers).
      // Both children start together, so that their compiles and writes overlap.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!fs::exists(go) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      int status = 1;
      try {
        ProgramCache cache(directory, kUnbounded);
        const ProgramCache::Result result = cache.get_or_compile(kernel_source(2), {}, kArch);
        status = result.output.image == reference.image ? 0 : 3;
      } catch (...) {
        status = 2;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  write_bytes(go, "");
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no result, 2: an exception, 3: a wrong image";
  }
  EXPECT_EQ(count_cache_files(directory), 1);
  EXPECT_TRUE(leftover_files(directory).empty());
  ProgramCache cache(directory, kUnbounded);
  const ProgramCache::Result loaded = cache.get_or_compile(kernel_source(2), {}, kArch);
  EXPECT_EQ(loaded.source, Source::Disk) << to_string(loaded.source);
  expect_same_output(loaded.output, reference, LogCheck::IgnoringTimes);
}

// Sets environment variables for one test and restores them afterwards.
class ScopedEnvironment {
 public:
  void set(const char* name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(ProgramCacheSettings, ComeFromTheEnvironment) {
  ScopedEnvironment environment;
  environment.set("ORTHOJIT_CUDA_CACHE", nullptr);
  environment.set("ORTHOJIT_CUDA_CACHE_MAX_MB", nullptr);
  environment.set("ORTHOJIT_CACHE_DIR", "/somewhere/cache");
  environment.set("XDG_CACHE_HOME", "/xdg");
  ProgramCacheSettings settings = program_cache_settings_from_environment();
  EXPECT_EQ(settings.directory, fs::path("/somewhere/cache/cuda"));
  EXPECT_EQ(settings.max_bytes, int64_t{512} << 20);

  environment.set("ORTHOJIT_CACHE_DIR", nullptr);
  EXPECT_EQ(program_cache_settings_from_environment().directory, fs::path("/xdg/orthojit/cuda"));
  environment.set("XDG_CACHE_HOME", nullptr);
  environment.set("HOME", "/home/someone");
  EXPECT_EQ(program_cache_settings_from_environment().directory, fs::path("/home/someone/.cache/orthojit/cuda"));

  environment.set("ORTHOJIT_CUDA_CACHE_MAX_MB", "3");
  EXPECT_EQ(program_cache_settings_from_environment().max_bytes, int64_t{3} << 20);
  environment.set("ORTHOJIT_CUDA_CACHE_MAX_MB", "lots");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(program_cache_settings_from_environment().max_bytes, int64_t{512} << 20);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("ORTHOJIT_CUDA_CACHE_MAX_MB"), std::string::npos);

  environment.set("ORTHOJIT_CUDA_CACHE_MAX_MB", nullptr);
  environment.set("ORTHOJIT_CUDA_CACHE", "off");
  settings = program_cache_settings_from_environment();
  EXPECT_TRUE(settings.directory.empty());
  EXPECT_FALSE(ProgramCache(settings.directory, settings.max_bytes).disk_enabled());
}

}  // namespace
}  // namespace orthojit::cuda
