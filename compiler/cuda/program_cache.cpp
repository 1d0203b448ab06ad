// CUDA program cache: key, file format, atomic writes, LRU size bound.
#include "cuda/program_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "support/sha256.h"

#ifndef ORTHOJIT_VERSION
#error "ORTHOJIT_VERSION must be defined (the program cache keys on the project version)"
#endif

namespace orthojit::cuda {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kTemporaryMarker = ".tmp.";
constexpr int64_t kDefaultMaxBytes = int64_t{512} << 20;
// A temporary file this old belongs to a writer that died between write and rename.
constexpr auto kStrayTemporaryAge = std::chrono::hours(1);

const std::string& cached_nvrtc_version() {
  static const std::string version = nvrtc_version();
  return version;
}

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && std::string_view(text).substr(text.size() - suffix.size()) == suffix;
}

enum class LoadStatus { Missing, Corrupt, Loaded };

LoadStatus load_program_file(const fs::path& path, const std::string& key, const std::string& arch, NvrtcOutput& output) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return LoadStatus::Missing;
  // One read of the whole file (a cubin is 0.1-1.5 MB; a warm load should take milliseconds).
  const std::streamoff size = in.tellg();
  if (size < 0) return LoadStatus::Corrupt;
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) return LoadStatus::Corrupt;
  std::optional<NvrtcOutput> loaded = deserialize_program_file(bytes, key, arch);
  if (!loaded) return LoadStatus::Corrupt;
  output = std::move(*loaded);
  return LoadStatus::Loaded;
}

// A name no other writer uses at the same time: another process (pid), another thread of this
// process (thread id) or this thread writing again (counter).
fs::path temporary_name_for(const fs::path& target) {
  static std::atomic<uint64_t> counter{0};
  const size_t thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return fs::path(target.string() + std::string(kTemporaryMarker) + std::to_string(::getpid()) + "." + std::to_string(thread) + "." +
                  std::to_string(counter.fetch_add(1)));
}

// Deletes the least recently used cache files until their total size is within `max_bytes`
// (`keep`, the file just written, is never deleted), and temporary files left by writers that
// died. Other processes do the same concurrently, so every file may vanish under us: errors
// are ignored, a file that is gone is as good as deleted.
void enforce_size_bound(const fs::path& directory, int64_t max_bytes, const fs::path& keep) {
  struct CacheFile {
    fs::path path;
    fs::file_time_type last_used;
    int64_t size;
  };
  std::vector<CacheFile> files;
  int64_t total = 0;
  const auto now = fs::file_time_type::clock::now();
  std::error_code error;
  for (auto it = fs::directory_iterator(directory, error); !error && it != fs::directory_iterator(); it.increment(error)) {
    std::error_code entry_error;
    if (!it->is_regular_file(entry_error) || entry_error) continue;
    const std::string name = it->path().filename().string();
    const fs::file_time_type written = fs::last_write_time(it->path(), entry_error);
    if (entry_error) continue;
    if (name.find(std::string(kProgramCacheExtension) + std::string(kTemporaryMarker)) != std::string::npos) {
      if (now - written > kStrayTemporaryAge) fs::remove(it->path(), entry_error);
      continue;
    }
    if (!ends_with(name, kProgramCacheExtension)) continue;
    const uintmax_t size = it->file_size(entry_error);
    if (entry_error) continue;
    files.push_back({it->path(), written, static_cast<int64_t>(size)});
    total += static_cast<int64_t>(size);
  }
  if (total <= max_bytes) return;
  // Oldest first; the name breaks ties so that eviction does not depend on directory order.
  std::sort(files.begin(), files.end(), [](const CacheFile& a, const CacheFile& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.path < b.path;
  });
  for (const CacheFile& file : files) {
    if (total <= max_bytes) break;
    if (file.path == keep) continue;
    std::error_code remove_error;
    fs::remove(file.path, remove_error);
    if (!remove_error) total -= file.size;
  }
}

std::string default_cache_root() {
  if (const char* cache = std::getenv("ORTHOJIT_CACHE_DIR"); cache && *cache) return cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/orthojit";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/orthojit";
  return ".orthojit-cache";
}

}  // namespace

// Writes `bytes` to a temporary file beside `target` and renames it over `target`: rename is
// atomic within a directory, so readers see the old file or the new one, never a mix, and
// concurrent writers of the same key all succeed (the last rename wins; the contents are equal).
// No fsync: a file torn by a power loss fails its checksum and is a miss.
bool write_file_atomically(const fs::path& target, const std::string& bytes, std::string& error_message) {
  const fs::path temporary = temporary_name_for(target);
  // POSIX calls, so that a failure says why (a full disk: "No space left on device").
  auto fail = [&](const std::string& what) {
    error_message = "cannot " + what + " " + temporary.string() + ": " + std::strerror(errno);
    std::error_code ignored;
    fs::remove(temporary, ignored);
    return false;
  };
  const int descriptor = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (descriptor < 0) return fail("create");
  for (size_t written = 0; written < bytes.size();) {
    const ssize_t count = ::write(descriptor, bytes.data() + written, bytes.size() - written);
    if (count < 0 && errno == EINTR) continue;
    if (count < 0) {
      const int saved = errno;
      ::close(descriptor);
      errno = saved;
      return fail("write");
    }
    written += static_cast<size_t>(count);
  }
  if (::close(descriptor) != 0) return fail("write");
  std::error_code error;
  fs::rename(temporary, target, error);
  if (error) {
    error_message = "cannot rename " + temporary.string() + " to " + target.string() + ": " + error.message();
    std::error_code ignored;
    fs::remove(temporary, ignored);
    return false;
  }
  return true;
}

std::string program_cache_key(const std::string& source, const NamedSources& headers, const std::string& arch,
                              const std::vector<std::string>& extra_options) {
  ByteWriter writer;
  writer.text("source");
  writer.text(source);
  writer.text("headers");
  writer.u64(headers.size());
  for (const auto& [name, text] : headers) {
    writer.text(name);
    writer.text(text);
  }
  std::vector<std::string> options = canonical_options(arch);
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  writer.text("options");
  writer.u64(options.size());
  for (const auto& option : options) writer.text(option);
  writer.text("arch");
  writer.text(arch);
  writer.text("nvrtc");
  writer.text(cached_nvrtc_version());
  writer.text("format");
  writer.u64(kProgramCacheFormatVersion);
  writer.text("orthojit");
  writer.text(ORTHOJIT_VERSION);
  return sha256_hex(writer.bytes());
}

ProgramCacheSettings program_cache_settings_from_environment() {
  ProgramCacheSettings settings;
  settings.max_bytes = kDefaultMaxBytes;
  if (const char* limit = std::getenv("ORTHOJIT_CUDA_CACHE_MAX_MB"); limit && *limit) {
    char* end = nullptr;
    errno = 0;
    const long long megabytes = std::strtoll(limit, &end, 10);
    if (errno != 0 || *end != '\0' || megabytes < 0 || megabytes > (int64_t{1} << 40))
      std::fprintf(stderr, "orthojit: ignoring ORTHOJIT_CUDA_CACHE_MAX_MB='%s' (expected a number of MiB); the CUDA program cache keeps up to %lld MiB\n",
                   limit, static_cast<long long>(kDefaultMaxBytes >> 20));
    else
      settings.max_bytes = static_cast<int64_t>(megabytes) << 20;
  }
  if (const char* mode = std::getenv("ORTHOJIT_CUDA_CACHE"); mode && std::string_view(mode) == "off") return settings;
  settings.directory = fs::path(default_cache_root()) / "cuda";
  return settings;
}

ProgramCache::ProgramCache(fs::path directory, int64_t max_bytes) : directory_(std::move(directory)), max_bytes_(max_bytes) {}

ProgramCache& ProgramCache::process_default() {
  static ProgramCache cache = [] {
    ProgramCacheSettings settings = program_cache_settings_from_environment();
    return ProgramCache(std::move(settings.directory), settings.max_bytes);
  }();
  return cache;
}

fs::path ProgramCache::file_for(const std::string& key) const { return directory_ / (key + kProgramCacheExtension); }

ProgramCache::Result ProgramCache::get_or_compile(const std::string& source, const NamedSources& headers, const std::string& arch) {
  const std::string key = program_cache_key(source, headers, arch);
  Result result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto found = memory_.find(key); found != memory_.end()) {
      result.output = found->second;
      result.source = Result::Source::Memory;
      return result;
    }
  }
  // Disk and NVRTC work run outside the lock, so threads compiling different programs do not
  // wait for each other. Two threads asking for the same new program both compile it; their
  // results are equal, and the disk write is atomic either way.
  if (disk_enabled()) {
    const fs::path path = file_for(key);
    switch (load_program_file(path, key, arch, result.output)) {
      case LoadStatus::Loaded: {
        // The mtime is the LRU clock. A read-only cache directory cannot record the use; fine.
        std::error_code ignored;
        fs::last_write_time(path, fs::file_time_type::clock::now(), ignored);
        std::lock_guard<std::mutex> lock(mutex_);
        memory_.try_emplace(key, result.output);
        result.source = Result::Source::Disk;
        return result;
      }
      case LoadStatus::Corrupt: {
        std::error_code ignored;
        fs::remove(path, ignored);
        break;
      }
      case LoadStatus::Missing: break;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  result.output = compile_cuda(source, headers, arch);  // a CudaCompileError leaves both layers untouched
  result.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.source = Result::Source::Compiled;
  if (disk_enabled()) store_on_disk(key, result.output);
  std::lock_guard<std::mutex> lock(mutex_);
  memory_.try_emplace(key, result.output);
  return result;
}

void ProgramCache::store_on_disk(const std::string& key, const NvrtcOutput& output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (disk_writes_disabled_) return;
  }
  std::error_code error;
  fs::create_directories(directory_, error);
  if (error) return disable_disk_writes("cannot create the directory: " + error.message());
  const fs::path path = file_for(key);
  std::string error_message;
  if (!write_file_atomically(path, serialize_program_file(key, output), error_message)) return disable_disk_writes(error_message);
  enforce_size_bound(directory_, max_bytes_, path);
}

void ProgramCache::disable_disk_writes(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (disk_writes_disabled_) return;  // warn once
  disk_writes_disabled_ = true;
  std::fprintf(stderr, "orthojit: warning: cannot write the CUDA program cache in %s (%s); compiled programs are kept in memory only\n",
               directory_.string().c_str(), reason.c_str());
}

}  // namespace orthojit::cuda
