// The CUDA program cache (docs/cuda-backend.md): compiled NVRTC output kept in memory per
// ProgramCache object (one per context) and on disk, one file per key, shared by every process of
// the user.
//
// Key: the SHA-256 of everything that changes the compiled image: the source, every header
// (name and text), the canonical NVRTC options, the arch, the NVRTC version, the cache-format
// version and the project version. A file is written to a unique temporary name and renamed
// into place, so a reader never sees half a file; its payload carries a checksum, and a file
// that does not verify is a miss (deleted, recompiled, rewritten), never a crash. Compile
// failures are not cached. The directory is bounded in size: the least recently used files
// (by mtime, which a hit refreshes) are deleted after a write that crosses the bound.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cuda/nvrtc_compiler.h"
#include "cuda/program_file.h"

namespace orthojit::cuda {

constexpr const char* kProgramCacheExtension = ".ojbin";

// 64 lowercase hex digits. `extra_options` are appended to canonical_options(arch).
std::string program_cache_key(const std::string& source, const NamedSources& headers, const std::string& arch,
                              const std::vector<std::string>& extra_options = {});

// Writes `bytes` to a unique temporary file beside `target` (pid, thread, counter) and renames it
// over `target`. Readers see the old file or the new one, never a mix; concurrent writers of
// one target all succeed. False, with the reason in `error_message`, when it cannot.
bool write_file_atomically(const std::filesystem::path& target, const std::string& bytes, std::string& error_message);

// Where process_default() keeps its files and how much it may keep.
struct ProgramCacheSettings {
  std::filesystem::path directory;  // empty: no disk layer
  int64_t max_bytes = 0;
};
// <cache dir>/cuda, where <cache dir> is $ORTHOJIT_CACHE_DIR, else $XDG_CACHE_HOME/orthojit, else
// ~/.cache/orthojit; 512 MiB unless $ORTHOJIT_CUDA_CACHE_MAX_MB says otherwise;
// ORTHOJIT_CUDA_CACHE=off turns the disk layer off.
ProgramCacheSettings program_cache_settings_from_environment();

class ProgramCache {
 public:
  // An empty `directory` keeps programs in memory only. `max_bytes` bounds the total size of the
  // cache files in `directory` (the file just written is always kept, even when larger).
  ProgramCache(std::filesystem::path directory, int64_t max_bytes);

  struct Result {
    NvrtcOutput output;
    enum class Source { Memory, Disk, Compiled } source = Source::Compiled;
    double compile_seconds = 0;  // NVRTC's time; 0 for a hit
  };

  // Thread-safe. Throws CudaCompileError (nothing is cached then). A directory that cannot be
  // written does not fail the call: a warning goes to stderr once, and from then on new programs
  // stay in memory only (files already there are still read).
  Result get_or_compile(const std::string& source, const NamedSources& headers, const std::string& arch);

  // The cache of the process, configured by program_cache_settings_from_environment().
  static ProgramCache& process_default();

  const std::filesystem::path& directory() const { return directory_; }
  int64_t max_bytes() const { return max_bytes_; }
  bool disk_enabled() const { return !directory_.empty(); }
  // <directory>/<key>.ojbin
  std::filesystem::path file_for(const std::string& key) const;

 private:
  void store_on_disk(const std::string& key, const NvrtcOutput& output);
  void disable_disk_writes(const std::string& reason);

  std::filesystem::path directory_;
  int64_t max_bytes_;
  std::mutex mutex_;  // guards the members below
  std::map<std::string, NvrtcOutput> memory_;
  bool disk_writes_disabled_ = false;
};

}  // namespace orthojit::cuda
