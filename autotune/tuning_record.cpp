// Tuning record files: load, merge under a lock, atomic replace.
#include "autotune/tuning_record.h"

#include "autotune/json_depth.h"
#include "autotune/json_integer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace orthojit::autotune {
namespace {

// An exclusive advisory lock on PATH.lock for the lifetime of the object.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    const std::string lock_path = path + ".lock";
    descriptor_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (descriptor_ < 0) throw std::runtime_error("cannot open the lock file " + lock_path + ": " + std::strerror(errno));
    while (::flock(descriptor_, LOCK_EX) != 0) {
      if (errno != EINTR) throw std::runtime_error("cannot lock " + lock_path + ": " + std::strerror(errno));
    }
  }
  ~FileLock() {
    ::flock(descriptor_, LOCK_UN);
    ::close(descriptor_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int descriptor_ = -1;
};

}  // namespace

std::string entry_key(const std::string& program_hash, int64_t rows, int64_t cols, int64_t batch, const std::string& storage,
                      const std::string& accumulate) {
  return "program=" + program_hash + ";shape=" + std::to_string(rows) + "x" + std::to_string(cols) + ";batch=" + std::to_string(batch) +
         ";storage=" + storage + ";accumulate=" + accumulate;
}

LoadedRecords load_tuning_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};  // no file: no records, nothing to say
  std::stringstream text;
  text << in.rdbuf();
  return parse_tuning_file(text.str(), path);
}

LoadedRecords parse_tuning_file(const std::string& text, const std::string& origin) {
  LoadedRecords result;
  try {
    if (const std::string deep = json_depth_problem(text); !deep.empty()) throw std::runtime_error(deep);
    const nlohmann::json document = nlohmann::json::parse(text);
    if (!document.is_object()) throw std::runtime_error("the top level is not a JSON object");
    const int schema = json_int(document.at("schema_version"), "schema_version");
    if (schema > kTuningSchemaVersion) result.newer_schema = schema;
    if (schema != kTuningSchemaVersion)
      throw std::runtime_error("schema version " + std::to_string(schema) + " (this build reads " + std::to_string(kTuningSchemaVersion) + ")");
    TuningFile file;
    file.fingerprint = DeviceFingerprint::from_json(document.at("fingerprint"));
    file.entries = document.at("entries");
    if (!file.entries.is_object()) throw std::runtime_error("\"entries\" is not an object");
    result.file = std::move(file);
  } catch (const std::exception& error) {
    result.warning = "tuning records in " + origin + " are unusable (" + error.what() + "); ignoring them";
    result.foreign = text.find_first_not_of(" \t\r\n") != std::string::npos && text.find("\"schema_version\"") == std::string::npos &&
                     text.find("\"fingerprint\"") == std::string::npos && text.find("\"entries\"") == std::string::npos;
  }
  return result;
}

nlohmann::json merged_tuning_document(const LoadedRecords& existing, const std::string& path, const DeviceFingerprint& fingerprint,
                                      const nlohmann::json& entries, std::string* warning) {
  TuningFile file;
  file.fingerprint = fingerprint;
  if (existing.newer_schema)
    throw std::runtime_error(path + " holds tuning records of a newer orthojit (schema version " + std::to_string(*existing.newer_schema) +
                             "; this build writes " + std::to_string(kTuningSchemaVersion) + "), which writing here would lose; write to another file with --out");
  if (existing.foreign)
    throw std::runtime_error(path + " is not a tuning-records file (it has none of their keys: schema_version, fingerprint, entries), which "
                             "writing here would replace; write the records to another file with --out");
  if (!existing.warning.empty()) {
    if (warning) *warning = existing.warning + "; the file is rebuilt";
  } else if (existing.file) {
    if (auto reason = fingerprint.mismatch(existing.file->fingerprint))
      throw std::runtime_error(path + " holds tuning records of another device (" + *reason + "); write to another file with --out");
    file.entries = existing.file->entries;
  }
  for (const auto& [key, entry] : entries.items()) file.entries[key] = entry;
  return {{"schema_version", kTuningSchemaVersion}, {"fingerprint", fingerprint.to_json()}, {"entries", file.entries}};
}

void merge_into_tuning_file(const std::string& path, const DeviceFingerprint& fingerprint, const nlohmann::json& entries, std::string* warning) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  FileLock lock(path);
  const nlohmann::json document = merged_tuning_document(load_tuning_file(path), path, fingerprint, entries, warning);
  // Every writer writes and renames its temporary file while it holds the lock, so one still
  // there now was left by a writer that died (killed mid-write): remove it.
  const std::string temporary_prefix = target.filename().string() + ".tmp.";
  std::error_code ignored;
  const std::filesystem::path folder = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  for (auto it = std::filesystem::directory_iterator(folder, ignored); !ignored && it != std::filesystem::directory_iterator(); it.increment(ignored))
    if (it->path().filename().string().rfind(temporary_prefix, 0) == 0) std::filesystem::remove(it->path(), ignored);

  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const std::string text = document.dump(2) + "\n";
  // POSIX calls rather than a stream, so that a failure says why (a full disk: "No space left on
  // device") and the temporary file is removed; the old file stays as it was.
  auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    std::filesystem::remove(temporary, ignored);
    throw std::runtime_error("cannot write the tuning records " + path + " (" + what + " " + temporary + ": " + why + "); the old file is unchanged");
  };
  const int descriptor = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (descriptor < 0) fail("creating");
  for (size_t written = 0; written < text.size();) {
    const ssize_t count = ::write(descriptor, text.data() + written, text.size() - written);
    if (count < 0 && errno == EINTR) continue;
    if (count < 0) {
      const int saved = errno;
      ::close(descriptor);
      errno = saved;
      fail("writing");
    }
    written += static_cast<size_t>(count);
  }
  if (::close(descriptor) != 0) fail("closing");
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary, ignored);
    throw std::runtime_error("cannot replace " + path + ": " + error.message());
  }
}

std::string tuning_path_unwritable_reason(const std::string& path) {
  const std::filesystem::path target(path);
  std::error_code error;
  if (std::filesystem::is_directory(target, error)) return path + " is a folder, not a file";
  if (path.empty()) return "the records path is empty";
  if (std::filesystem::exists(target, error) && load_tuning_file(path).foreign)
    return path + " is not a tuning-records file (it has none of their keys), which writing there would replace";
  const std::filesystem::path folder = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::filesystem::create_directories(folder, error);
  if (error) return "cannot create the folder " + folder.string() + " for " + target.filename().string() + ": " + error.message();
  // What merge_into_tuning_file does at the end: a new file beside the target.
  const std::string probe = path + ".probe." + std::to_string(::getpid());
  const int descriptor = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (descriptor < 0) return "cannot create a file in " + folder.string() + ": " + std::strerror(errno);
  ::close(descriptor);
  std::filesystem::remove(probe, error);
  return "";
}

std::string default_tuning_path(const DeviceFingerprint& fingerprint) {
  if (const char* file = std::getenv("ORTHOJIT_TUNING_FILE"); file && *file) return file;
  std::string directory;
  if (const char* cache = std::getenv("ORTHOJIT_CACHE_DIR"); cache && *cache) directory = cache;
  else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) directory = std::string(xdg) + "/orthojit";
  else if (const char* home = std::getenv("HOME"); home && *home) directory = std::string(home) + "/.cache/orthojit";
  else directory = ".orthojit-cache";
  return directory + "/tuning/" + fingerprint.id() + ".json";
}

std::string utc_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

}  // namespace orthojit::autotune
