// Tuning records: JSON files (nlohmann/json), one per device fingerprint (docs/autotuning.md,
// "Tuning records").
//
//   { "schema_version": 1,
//     "fingerprint": { backend, device, isa, cores, compiler, orthojit, schema },
//     "entries": { "<key>": { program, program_hash, rows, cols, batch, storage, candidates: [ {label,
//                  config, status, message, p20_ms, p50_ms, p80_ms, repeats, error} ], winner,
//                  default_label, default_p50_ms, vendor_p50_ms, bench: {...}, timestamp } } }
//
// Keys are sorted and the file is pretty-printed, so records diff and can ship as defaults.
// Writers take an exclusive lock (flock on FILE.lock), re-read the file, merge their entries
// over it and rename a temporary file into place: concurrent `orthojit tune` processes lose
// nothing and a reader never sees half a file. A corrupt or truncated file is reported and
// rebuilt, never a crash.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autotune/device_fingerprint.h"

namespace orthojit::autotune {

// The canonical entry key: program hash, shape, batch and types.
std::string entry_key(const std::string& program_hash, int64_t rows, int64_t cols, int64_t batch, const std::string& storage,
                      const std::string& accumulate);

struct TuningFile {
  DeviceFingerprint fingerprint;
  nlohmann::json entries = nlohmann::json::object();  // key -> entry
};

struct LoadedRecords {
  std::optional<TuningFile> file;  // nullopt: no file, or not usable (see warning)
  std::string warning;             // non-empty when the file was corrupt or of another schema
  // Set when the file's schema is newer than this build's: written by a newer orthojit, whose
  // records this build cannot read but must not destroy (merged_tuning_document refuses it).
  std::optional<int> newer_schema;
  // Set when the unusable text does not look like tuning records at all (none of their keys:
  // a model config, an .npy, garbage): merged_tuning_document refuses to replace it, where a
  // damaged records file is rebuilt.
  bool foreign = false;
};

// Reads `path`. A missing file gives {nullopt, ""}; an unreadable, truncated or malformed one
// gives {nullopt, "…why…"} (the caller warns and carries on without records).
LoadedRecords load_tuning_file(const std::string& path);
// The same from a file's text; `origin` names it in the warning.
LoadedRecords parse_tuning_file(const std::string& text, const std::string& origin);

// Merges `entries` into the file at `path` for `fingerprint` under the lock and writes it
// atomically; creates directories as needed. A corrupt existing file, or one of an older schema,
// is replaced (its name and the problem go to `warning`). Throws std::runtime_error when the file
// holds another device's records (the message names the difference) or a newer schema's, or
// cannot be written.
void merge_into_tuning_file(const std::string& path, const DeviceFingerprint& fingerprint, const nlohmann::json& entries, std::string* warning);
// The document merge_into_tuning_file writes, given what `path` held (`existing`, from
// load_tuning_file or parse_tuning_file): `entries` over the existing ones. Throws
// std::runtime_error for another device's records, a newer schema, or an `entries` that is not
// an object.
nlohmann::json merged_tuning_document(const LoadedRecords& existing, const std::string& path, const DeviceFingerprint& fingerprint,
                                      const nlohmann::json& entries, std::string* warning);

// Why the tuning records cannot be written at `path` ("" when they can): its folder cannot be
// made, or a file cannot be created in it, or `path` is a folder. Creates the folder; leaves no
// file behind. Asked before tuning, so that minutes of timing are not lost to it at the end.
std::string tuning_path_unwritable_reason(const std::string& path);

// Default location: $ORTHOJIT_TUNING_FILE, else <cache dir>/tuning/<fingerprint id>.json, the
// cache dir being $ORTHOJIT_CACHE_DIR, else $XDG_CACHE_HOME/orthojit, else ~/.cache/orthojit.
std::string default_tuning_path(const DeviceFingerprint& fingerprint);

// "2026-12-01T01:02:03Z"
std::string utc_timestamp();

}  // namespace orthojit::autotune
