// CUDA program cache: key, file format, atomic writes, LRU size bound.
#include "cuda/program_cache.h"

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

// The first bytes of every cache file: says what the file is to a person running `head` on it.
constexpr std::string_view kMagic = "orthojit cuda program\n";
constexpr std::string_view kTemporaryMarker = ".tmp.";
constexpr int64_t kDefaultMaxBytes = int64_t{512} << 20;
// A temporary file this old belongs to a writer that died between write and rename.
constexpr auto kStrayTemporaryAge = std::chrono::hours(1);

// Fields are length-prefixed, little-endian, so that no two different inputs serialize (or
// hash, for the key) the same: ("ab", "c") and ("a", "bc") must not collide.
class ByteWriter {
 public:
  void u64(uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) bytes_.push_back(static_cast<char>((value >> (8 * byte)) & 0xffu));
  }
  void i64(int64_t value) { u64(static_cast<uint64_t>(value)); }
  void text(std::string_view value) {
    u64(value.size());
    bytes_.append(value);
  }
  void raw(std::string_view value) { bytes_.append(value); }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

// Reads what ByteWriter wrote; every read is bounds-checked, and a failed read leaves the reader
// failed (later reads return nothing), so a damaged file cannot make it read out of bounds.
class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return bytes_.size() - position_; }
  std::string_view rest() const { return bytes_.substr(position_); }

  uint64_t u64() {
    if (!take(8)) return 0;
    uint64_t value = 0;
    for (int byte = 0; byte < 8; ++byte)
      value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[position_ - 8 + static_cast<size_t>(byte)])) << (8 * byte);
    return value;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::string text() {
    const uint64_t size = u64();
    if (!ok_ || size > remaining()) {
      ok_ = false;
      return {};
    }
    return std::string(raw(static_cast<size_t>(size)));
  }
  std::string_view raw(size_t size) {
    if (!take(size)) return {};
    return bytes_.substr(position_ - size, size);
  }

 private:
  bool take(size_t size) {
    if (!ok_ || size > remaining()) {
      ok_ = false;
      return false;
    }
    position_ += size;
    return true;
  }

  std::string_view bytes_;
  size_t position_ = 0;
  bool ok_ = true;
};

std::string serialize_payload(const NvrtcOutput& output) {
  ByteWriter writer;
  writer.text(output.arch);
  writer.text(std::string_view(output.image.data(), output.image.size()));
  writer.text(output.log);
  writer.u64(output.resources.size());
  for (const auto& [kernel, resources] : output.resources) {
    writer.text(kernel);
    for (int value : {resources.registers, resources.spill_store_bytes, resources.spill_load_bytes, resources.stack_bytes, resources.shared_bytes})
      writer.i64(value);
  }
  writer.u64(output.options.size());
  for (const auto& option : output.options) writer.text(option);
  return std::move(writer.bytes());
}

std::optional<NvrtcOutput> deserialize_payload(std::string_view payload) {
  ByteReader reader(payload);
  NvrtcOutput output;
  output.arch = reader.text();
  const std::string image = reader.text();
  output.image.assign(image.begin(), image.end());
  output.log = reader.text();
  // Counts are checked against what is left (each entry takes at least 8 bytes), so a damaged
  // count cannot make the loop run for long.
  const uint64_t kernels = reader.u64();
  if (!reader.ok() || kernels > reader.remaining() / 8) return std::nullopt;
  for (uint64_t index = 0; index < kernels && reader.ok(); ++index) {
    std::string kernel = reader.text();
    KernelResources resources;
    for (int* field : {&resources.registers, &resources.spill_store_bytes, &resources.spill_load_bytes, &resources.stack_bytes, &resources.shared_bytes})
      *field = static_cast<int>(reader.i64());
    output.resources.emplace(std::move(kernel), resources);
  }
  const uint64_t options = reader.u64();
  if (!reader.ok() || options > reader.remaining() / 8) return std::nullopt;
  for (uint64_t index = 0; index < options && reader.ok(); ++index) output.options.push_back(reader.text());
  if (!reader.ok() || reader.remaining() != 0) return std::nullopt;
  return output;
}

const std::string& cached_nvrtc_version() {
  static const std::string version = nvrtc_version();
  return version;
}

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() && std::string_view(text).substr(text.size() - suffix.size()) == suffix;
}

enum class LoadStatus { Missing, Corrupt, Loaded };

LoadStatus load_program_file(const fs::path& path, const std::string& key, const std::string& arch, NvrtcOutput& output) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return LoadStatus::Missing;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return LoadStatus::Corrupt;
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
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) {
      error_message = "cannot create " + temporary.string() + ": " + std::strerror(errno);
      return false;
    }
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      error_message = "cannot write " + temporary.string() + " (disk full?)";
      std::error_code ignored;
      fs::remove(temporary, ignored);
      return false;
    }
  }
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

std::string serialize_program_file(const std::string& key, const NvrtcOutput& output) {
  const std::string payload = serialize_payload(output);
  ByteWriter writer;
  writer.raw(kMagic);
  writer.u64(kProgramCacheFormatVersion);
  writer.text(key);
  writer.text(output.arch);
  writer.u64(payload.size());
  writer.text(sha256_hex(payload));
  writer.raw(payload);
  return std::move(writer.bytes());
}

std::optional<NvrtcOutput> deserialize_program_file(const std::string& bytes, const std::string& key, const std::string& arch) {
  ByteReader reader(bytes);
  if (reader.raw(kMagic.size()) != kMagic) return std::nullopt;
  if (reader.u64() != kProgramCacheFormatVersion) return std::nullopt;
  if (reader.text() != key) return std::nullopt;
  if (reader.text() != arch) return std::nullopt;
  const uint64_t payload_size = reader.u64();
  const std::string checksum = reader.text();
  if (!reader.ok() || payload_size != reader.remaining()) return std::nullopt;
  const std::string_view payload = reader.rest();
  if (sha256_hex(payload) != checksum) return std::nullopt;
  std::optional<NvrtcOutput> output = deserialize_payload(payload);
  if (!output || output->arch != arch) return std::nullopt;
  return output;
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
