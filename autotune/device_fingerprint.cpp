// Device fingerprints.
#include "autotune/device_fingerprint.h"

#include "autotune/json_integer.h"

#include "cpu/llvm_jit.h"
#include "support/host_cpu.h"
#include "support/sha256.h"

namespace orthojit::autotune {

nlohmann::json DeviceFingerprint::to_json() const {
  return {{"backend", backend}, {"device", device}, {"isa", isa}, {"cores", cores}, {"compiler", compiler}, {"orthojit", orthojit}, {"schema", schema}};
}

DeviceFingerprint DeviceFingerprint::from_json(const nlohmann::json& value) {
  DeviceFingerprint result;
  result.backend = value.at("backend").get<std::string>();
  result.device = value.at("device").get<std::string>();
  result.isa = value.at("isa").get<std::string>();
  result.cores = json_int(value.at("cores"), "the fingerprint's cores");
  result.compiler = value.at("compiler").get<std::string>();
  result.orthojit = value.at("orthojit").get<std::string>();
  result.schema = json_int(value.at("schema"), "the fingerprint's schema");
  return result;
}

std::string DeviceFingerprint::id() const { return backend + "-" + sha256_hex(to_json().dump()).substr(0, 12); }

std::optional<std::string> DeviceFingerprint::mismatch(const DeviceFingerprint& recorded) const {
  auto differs = [](const char* what, const std::string& here, const std::string& there) -> std::optional<std::string> {
    if (here == there) return std::nullopt;
    return std::string(what) + " differs: recorded '" + there + "', this machine '" + here + "'";
  };
  if (auto reason = differs("schema version", std::to_string(schema), std::to_string(recorded.schema))) return reason;
  if (auto reason = differs("backend", backend, recorded.backend)) return reason;
  if (auto reason = differs("device", device, recorded.device)) return reason;
  if (auto reason = differs("ISA", isa, recorded.isa)) return reason;
  if (auto reason = differs("core count", std::to_string(cores), std::to_string(recorded.cores))) return reason;
  if (auto reason = differs("compiler", compiler, recorded.compiler)) return reason;
  if (auto reason = differs("orthojit version", orthojit, recorded.orthojit)) return reason;
  return std::nullopt;
}

DeviceFingerprint cpu_fingerprint() {
  DeviceFingerprint fingerprint;
  fingerprint.backend = "cpu";
  fingerprint.device = host_cpu().model;
  fingerprint.isa = host_cpu().best_isa();
  fingerprint.cores = host_cpu().logical_cores;
  fingerprint.compiler = cpu::llvm_version();
  fingerprint.orthojit = ORTHOJIT_VERSION;
  return fingerprint;
}

}  // namespace orthojit::autotune
