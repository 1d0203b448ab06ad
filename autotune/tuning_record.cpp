// Tuning record files: load, merge under a lock, atomic replace.
#include "autotune/tuning_record.h"

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
  LoadedRecords result;
  std::ifstream in(path, std::ios::binary);
  if (!in) return result;  // no file: no records, nothing to say
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json document = nlohmann::json::parse(text.str());
    if (!document.is_object()) throw std::runtime_error("the top level is not a JSON object");
    const int schema = document.at("schema_version").get<int>();
    if (schema != kTuningSchemaVersion)
      throw std::runtime_error("schema version " + std::to_string(schema) + " (this build reads " + std::to_string(kTuningSchemaVersion) + ")");
    TuningFile file;
    file.fingerprint = DeviceFingerprint::from_json(document.at("fingerprint"));
    file.entries = document.at("entries");
    if (!file.entries.is_object()) throw std::runtime_error("\"entries\" is not an object");
    result.file = std::move(file);
  } catch (const std::exception& error) {
    result.warning = "tuning records in " + path + " are unusable (" + error.what() + "); ignoring them";
  }
  return result;
}

void merge_into_tuning_file(const std::string& path, const DeviceFingerprint& fingerprint, const nlohmann::json& entries, std::string* warning) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  FileLock lock(path);
  TuningFile file;
  file.fingerprint = fingerprint;
  const LoadedRecords existing = load_tuning_file(path);
  if (!existing.warning.empty()) {
    if (warning) *warning = existing.warning + "; the file is rebuilt";
  } else if (existing.file) {
    if (auto reason = fingerprint.mismatch(existing.file->fingerprint))
      throw std::runtime_error(path + " holds tuning records of another device (" + *reason + "); write to another file with --out");
    file.entries = existing.file->entries;
  }
  for (const auto& [key, entry] : entries.items()) file.entries[key] = entry;
  const nlohmann::json document = {{"schema_version", kTuningSchemaVersion}, {"fingerprint", fingerprint.to_json()}, {"entries", file.entries}};
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << document.dump(2) << "\n";
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + temporary);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary);
    throw std::runtime_error("cannot replace " + path + ": " + error.message());
  }
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
