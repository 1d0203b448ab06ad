// What a saved optimizer state holds, for `orthojit inspect-state` and orthojit.inspect_state:
// the file's format and settings (its orthojit.* metadata), its parameters by kind (Muon: a
// "<name>.momentum_buffer" and a variant's buffers; AdamW: "<name>.exp_avg", ".exp_avg_sq" and
// the I64 ".step"), the steps taken, its tensors, and whether the data matches its SHA-256. Any
// orthojit state file: HybridOptimizer's, DeviceOptimizer's, the distributed optimizer's (one
// file for any world size), orthojit.Muon's and DistributedMuon's (with their param_groups).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/muon/safetensors_file.h"

namespace orthojit::runtime {

struct StateFileSummary {
  std::string path;
  std::map<std::string, std::string> metadata;  // every key (orthojit.format, .preset, .steps_taken, ...)
  std::vector<TensorPlace> tensors;             // in the file's order
  uint64_t data_bytes = 0;
  // Parameters by kind, in the file's order, with their element counts.
  std::vector<std::pair<std::string, int64_t>> muon, adam;
  int64_t adam_steps_min = 0, adam_steps_max = 0;  // over the AdamW parameters' step tensors
  // Tensors that belong to neither kind (the file is then not one orthojit wrote).
  std::vector<std::string> unknown;
  std::string checksum;            // the recorded SHA-256, or empty when the file has none
  bool checksum_verified = false;  // every data byte read and hashed, and equal to it
};

// Reads the header and, when `verify` is set, every byte of the data (one streaming pass). Throws
// SafetensorsError for a file that cannot be read, is not a safetensors file or (verify) whose
// data does not match its checksum, naming the file; UsageError (runtime/errors.h) for a
// safetensors file that is not an orthojit optimizer state (no orthojit.format), saying what it
// holds instead.
// `progress` reports the checksum's pass over the data (runtime/muon/file_progress.h).
StateFileSummary summarize_state_file(const std::string& path, bool verify, const FileProgressCallback& progress = {});

// As `orthojit inspect-state --json` prints it and orthojit.inspect_state returns it: path,
// metadata, data_bytes, muon and adam ([{name, elements}]), adam_steps ([min, max]), unknown,
// checksum, checksum_verified, tensors ([{name, dtype, shape}]).
nlohmann::json state_summary_json(const StateFileSummary& summary);

}  // namespace orthojit::runtime
