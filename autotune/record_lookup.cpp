// Runtime lookup of tuning records.
#include "autotune/record_lookup.h"

#include <filesystem>
#include <mutex>

#include "autotune/device_fingerprint.h"
#include "autotune/gram_restart_search.h"
#include "autotune/tuner.h"
#include "autotune/tuning_record.h"

namespace orthojit::autotune {
namespace {

struct CachedRecords {
  std::string path;
  std::filesystem::file_time_type modified;
  LoadedRecords loaded;
  std::optional<std::string> mismatch;
  bool valid = false;
};

// The records for this device, reloaded when the file changes.
const CachedRecords& current_records() {
  static std::mutex mutex;
  static CachedRecords cache;
  std::lock_guard<std::mutex> lock(mutex);
  const DeviceFingerprint here = cpu_fingerprint();
  const std::string path = default_tuning_path(here);
  std::error_code error;
  const auto modified = std::filesystem::last_write_time(path, error);
  if (cache.valid && cache.path == path && !error && cache.modified == modified) return cache;
  cache = CachedRecords{};
  cache.path = path;
  cache.valid = true;
  if (error) return cache;  // no file
  cache.modified = modified;
  cache.loaded = load_tuning_file(path);
  if (cache.loaded.file) cache.mismatch = here.mismatch(cache.loaded.file->fingerprint);
  return cache;
}

}  // namespace

TunedChoice lookup_tuned(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, std::optional<ScalarType> precision) {
  TunedChoice choice;
  const CachedRecords& records = current_records();
  if (!records.loaded.file) {
    choice.reason = records.loaded.warning.empty() ? "no tuning record" : records.loaded.warning;
    return choice;
  }
  if (records.mismatch) {
    choice.reason = "tuning records in " + records.path + " not used: " + *records.mismatch;
    return choice;
  }
  const auto& entries = records.loaded.file->entries;
  std::string key = problem_key(program, rows, cols, batch, precision).key;
  // A batch nobody tuned takes its matrix's own record: an optimizer groups a model's equal
  // shapes into batches (one per shape and step), while `tune --model` tunes each shape once.
  // The strategy and kernels that win for one matrix are the ones each matrix of the batch runs.
  std::string of_one_matrix;
  if (!entries.contains(key) && batch > 1) {
    key = problem_key(program, rows, cols, 1, precision).key;
    of_one_matrix = " (the record of one matrix, for each of the batch's " + std::to_string(batch) + ")";
  }
  if (!entries.contains(key)) {
    choice.reason = "no tuning record for this shape";
    return choice;
  }
  const auto& entry = entries.at(key);
  if (!entry.contains("winner") || entry.at("winner").is_null()) {
    choice.reason = "the tuning record has no winner (no candidate passed)";
    return choice;
  }
  try {
    choice.winner = Candidate::from_json(entry.at("winner").at("config"));
    choice.gram_restarts = recorded_restarts(entry, static_cast<int>(program.steps.size()));
    char text[64];
    std::snprintf(text, sizeof text, ", %.3g ms", entry.at("winner").value("p50_ms", 0.0));
    choice.reason = "tuned: " + choice.winner->label() + text + restarts_note(choice.gram_restarts) + of_one_matrix + " (" + records.path + ")";
  } catch (const std::exception& error) {
    choice.winner.reset();
    choice.gram_restarts.reset();
    choice.reason = std::string("the tuning record's winner is unreadable: ") + error.what();
  }
  return choice;
}

std::string describe_tuning_records() {
  const CachedRecords& records = current_records();
  if (!records.loaded.file) {
    if (!records.loaded.warning.empty()) return records.loaded.warning;
    return records.path + ": none yet (run `orthojit tune`); the heuristic decides";
  }
  const std::string count = std::to_string(records.loaded.file->entries.size()) + " entries";
  if (records.mismatch) return records.path + ": " + count + ", NOT used on this machine: " + *records.mismatch;
  return records.path + ": " + count + ", fingerprint matches this machine";
}

}  // namespace orthojit::autotune
