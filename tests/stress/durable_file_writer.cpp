// stress_file_writer: writes and checks the three files orthojit replaces in place, through the
// functions the tools themselves call, for the stress tests of tests/stress/ (a process killed in
// the middle of a write, concurrent tuners, a full disk):
//
//   record FILE TAG COUNT      merge COUNT entries "TAG-0".."TAG-<COUNT-1>" into the tuning record
//                              FILE one at a time (merge_into_tuning_file, as `orthojit tune` does)
//   read-records FILE STOP     load FILE until the file STOP exists; exit 1 on the first load that
//                              is not a complete record (a torn or half-written file)
//   check-record FILE TAG:COUNT...
//                              exit 0 when FILE loads and holds every listed entry
//   cache FILE VERSION [loop]  write a CUDA program-cache file (write_file_atomically of
//                              serialize_program_file, as ProgramCache::store_on_disk does) whose
//                              image is VERSION repeated; with `loop`, VERSION, VERSION+1, ... forever
//   check-cache FILE           print the version of a complete cache file; exit 1 on a torn one
//   state FILE VERSION [loop]  write an optimizer state (write_state_file, as save_state does) whose
//                              buffers hold VERSION; with `loop` forever, counting up
//   check-state FILE           print the version of a complete state file; exit 1 otherwise
//
// The files are made large (megabytes) so that a kill lands inside a write. Errors go to stderr
// with exit status 1; that message is what the full-disk test checks. Exit status 77: the mode
// is not in this build (the program cache needs the CUDA toolkit at configure time).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "autotune/tuning_record.h"
#include "cuda/program_file.h"
#ifdef ORTHOJIT_STRESS_HAVE_PROGRAM_CACHE
#include "cuda/program_cache.h"
#endif
#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/state_format.h"

namespace {

namespace at = orthojit::autotune;
namespace cu = orthojit::cuda;
namespace rt = orthojit::runtime;

const std::string kCacheKey(64, 'c');
constexpr const char* kCacheArch = "sm_90";
constexpr int64_t kCacheImageBytes = 4 << 20;
constexpr int64_t kStateRows = 512, kStateCols = 1024;  // 2 MiB of momentum

at::DeviceFingerprint fingerprint() {
  at::DeviceFingerprint here;
  here.backend = "cpu";
  here.device = "stress test device";
  here.isa = "avx2";
  here.cores = 2;
  here.compiler = "LLVM 19";
  here.orthojit = "stress";
  return here;
}

int record(const std::string& path, const std::string& tag, int count) {
  // A quarter megabyte per entry, so the file grows to megabytes and each rewrite takes a while.
  const std::string padding(256 << 10, 'p');
  for (int i = 0; i < count; ++i) {
    const nlohmann::json entry = {{"tag", tag}, {"index", i}, {"padding", padding}};
    std::string warning;
    at::merge_into_tuning_file(path, fingerprint(), {{tag + "-" + std::to_string(i), entry}}, &warning);
    if (!warning.empty()) {
      std::fprintf(stderr, "stress_file_writer: %s\n", warning.c_str());
      return 1;
    }
  }
  return 0;
}

int read_records(const std::string& path, const std::string& stop) {
  int loads = 0;
  size_t entries = 0;
  while (!std::filesystem::exists(stop)) {
    if (!std::filesystem::exists(path)) continue;
    const at::LoadedRecords loaded = at::load_tuning_file(path);
    if (!loaded.file) {
      // A missing file reads as {nullopt, ""}: the rename makes the file appear whole or not at all.
      if (loaded.warning.empty()) continue;
      std::fprintf(stderr, "stress_file_writer: load %d: %s\n", loads, loaded.warning.c_str());
      return 1;
    }
    if (loaded.file->entries.size() < entries) {
      std::fprintf(stderr, "stress_file_writer: load %d has %zu entries, an earlier one had %zu (a merge lost entries)\n", loads,
                   loaded.file->entries.size(), entries);
      return 1;
    }
    entries = loaded.file->entries.size();
    ++loads;
  }
  std::printf("%d loads, %zu entries at the end\n", loads, entries);
  return 0;
}

int check_record(const std::string& path, int argc, char** argv) {
  const at::LoadedRecords loaded = at::load_tuning_file(path);
  if (!loaded.file) {
    std::fprintf(stderr, "stress_file_writer: %s\n", loaded.warning.empty() ? "no record file" : loaded.warning.c_str());
    return 1;
  }
  for (int i = 0; i < argc; ++i) {
    const std::string spec = argv[i];
    const size_t colon = spec.find(':');
    const std::string tag = spec.substr(0, colon);
    const int count = std::atoi(spec.c_str() + colon + 1);
    for (int index = 0; index < count; ++index) {
      const std::string key = tag + "-" + std::to_string(index);
      if (!loaded.file->entries.contains(key) || loaded.file->entries.at(key).at("index") != index) {
        std::fprintf(stderr, "stress_file_writer: %s has no entry %s\n", path.c_str(), key.c_str());
        return 1;
      }
    }
  }
  std::printf("%zu entries\n", loaded.file->entries.size());
  return 0;
}

void write_cache(const std::string& path, int version) {
#ifndef ORTHOJIT_STRESS_HAVE_PROGRAM_CACHE
  (void)path;
  (void)version;
  throw std::logic_error("this build has no CUDA program cache (no CUDA toolkit at configure time)");
#else
  cu::NvrtcOutput output;
  output.arch = kCacheArch;
  output.image.assign(static_cast<size_t>(kCacheImageBytes), static_cast<char>(version & 0x7f));
  output.log = "version " + std::to_string(version);
  std::string error;
  if (!cu::write_file_atomically(path, cu::serialize_program_file(kCacheKey, output), error)) throw std::runtime_error(error);
#endif
}

int check_cache(const std::string& path) {
  const auto bytes = [&] {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (!file) throw std::runtime_error("cannot open " + path);
    std::string text;
    char buffer[1 << 16];
    for (size_t got; (got = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, got);
    std::fclose(file);
    return text;
  }();
  const std::optional<cu::NvrtcOutput> output = cu::deserialize_program_file(bytes, kCacheKey, kCacheArch);
  if (!output) {
    std::fprintf(stderr, "stress_file_writer: %s is not a complete cache file (%zu bytes)\n", path.c_str(), bytes.size());
    return 1;
  }
  const int version = std::atoi(output->log.c_str() + std::strlen("version "));
  for (char byte : output->image)
    if (byte != static_cast<char>(version & 0x7f)) {
      std::fprintf(stderr, "stress_file_writer: %s mixes versions\n", path.c_str());
      return 1;
    }
  std::printf("%d\n", version);
  return 0;
}

const std::vector<rt::StateOwner> kStateOwners = {{"layer.weight", {kStateRows, kStateCols}, true}};

void write_state(const std::string& path, int version) {
  std::map<std::string, rt::HybridOptimizer::State> state;
  state["layer.weight"].momentum.assign(static_cast<size_t>(kStateRows * kStateCols), static_cast<float>(version));
  rt::write_state_file(path, kStateOwners, state, rt::preset_settings("keller"), version);
}

int check_state(const std::string& path) {
  int64_t steps = -1;
  const auto state = rt::read_state_file(path, kStateOwners, rt::preset_settings("keller"), steps);
  for (float value : state.at("layer.weight").momentum)
    if (value != static_cast<float>(steps)) {
      std::fprintf(stderr, "stress_file_writer: %s mixes versions (%g in a state of step %lld)\n", path.c_str(), value, static_cast<long long>(steps));
      return 1;
    }
  std::printf("%lld\n", static_cast<long long>(steps));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: stress_file_writer record|read-records|check-record|cache|check-cache|state|check-state FILE ...\n");
    return 2;
  }
  const std::string mode = argv[1], path = argv[2];
  const bool loop = argc > 4 && std::string(argv[4]) == "loop";
  try {
    if (mode == "record" && argc == 5) return record(path, argv[3], std::atoi(argv[4]));
    if (mode == "read-records" && argc == 4) return read_records(path, argv[3]);
    if (mode == "check-record") return check_record(path, argc - 3, argv + 3);
    if (mode == "check-cache") return check_cache(path);
    if (mode == "check-state") return check_state(path);
    if ((mode == "cache" || mode == "state") && argc >= 4) {
      for (int version = std::atoi(argv[3]);; ++version) {
        (mode == "cache" ? write_cache : write_state)(path, version);
        if (!loop) return 0;
      }
    }
  } catch (const std::logic_error& error) {
    std::fprintf(stderr, "stress_file_writer: %s\n", error.what());
    return 77;  // not in this build: the test skips the case
  } catch (const std::exception& error) {
    std::fprintf(stderr, "stress_file_writer: %s\n", error.what());
    return 1;
  }
  std::fprintf(stderr, "stress_file_writer: bad arguments for mode %s\n", mode.c_str());
  return 2;
}
