// What a tuning record was measured on (docs/autotuning.md, "Tuning records"). A record is used
// only on a device with the same fingerprint: a kernel's speed on another CPU, core count or
// compiler version says nothing.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace orthojit::autotune {

inline constexpr int kTuningSchemaVersion = 1;

struct DeviceFingerprint {
  std::string backend;         // "cpu" (later "cuda")
  std::string device;          // CPU brand string or GPU name
  std::string isa;             // best ISA path ("avx512bf16", ...) or compute capability
  int cores = 0;               // logical cores (or SMs)
  std::string compiler;        // "LLVM 19.1.7" (or NVRTC's version)
  std::string orthojit;        // project version
  int schema = kTuningSchemaVersion;

  nlohmann::json to_json() const;
  static DeviceFingerprint from_json(const nlohmann::json& value);  // throws nlohmann::json::exception on a bad shape
  // A short stable id (12 hex digits of SHA-256 of the canonical JSON): the default file name.
  std::string id() const;
  // Why `recorded` does not apply to this device (first difference), or nullopt when it does.
  std::optional<std::string> mismatch(const DeviceFingerprint& recorded) const;
};

DeviceFingerprint cpu_fingerprint();

}  // namespace orthojit::autotune
