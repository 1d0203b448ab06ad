// Saved-state formats and momentum conversion (see state_format.h).
#include "runtime/muon/state_format.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "runtime/muon/safetensors_file.h"

namespace orthojit::runtime {

MomentumKind saved_momentum_kind(const std::string& format, const std::string& preset, const std::string& momentum_kind) {
  if (!momentum_kind.empty()) {
    auto kind = parse_momentum_kind(momentum_kind);
    if (!kind) throw std::runtime_error("optimizer state: momentum_kind '" + momentum_kind + "' is not ema or sum");
    return *kind;
  }
  // Format 1 (no record): the form each preset had when format 1 was written.
  (void)format;
  return (preset == "keller" || preset == "moonlight") ? MomentumKind::Sum : MomentumKind::Ema;
}

std::string momentum_mismatch_message(const std::string& where, const std::string& format, MomentumKind saved, MomentumKind wanted) {
  auto form = [](MomentumKind kind) {
    return kind == MomentumKind::Sum ? std::string("the sum form (buf <- beta*buf + g)") : std::string("the EMA form (buf <- lerp(buf, g, 1-beta))");
  };
  std::string text = where + " holds momentum buffers in " + form(saved) + " but this optimizer uses " + form(wanted);
  if (format == "hybrid-optimizer-state/1")
    text += " (a format 1 state: the keller preset followed the 2024 KellerJordan/Muon sum form until it moved to the EMA of the current code)";
  text += "; nothing was loaded. The buffers differ by the factor 1/(1-beta). Either convert the state (`orthojit convert-state --input FILE "
          "--output NEW --momentum-kind " +
          std::string(to_string(wanted)) + " --momentum BETA`; Python: orthojit.convert_momentum_state(state_dict, to=\"" + to_string(wanted) +
          "\", momentum=BETA); exact for a constant beta) or keep the saved form with the setting muon.momentum_kind = " + to_string(saved);
  return text;
}

ConversionReport convert_state_momentum(const std::string& input, const std::string& output, MomentumKind to, double beta) {
  if (!(beta >= 0 && beta < 1)) throw std::invalid_argument("the momentum beta must be in [0, 1)");
  SafetensorsFile file = read_safetensors(input);
  const auto format = file.metadata.find("orthojit.format");
  if (format == file.metadata.end() || (format->second != kStateFormat && format->second != "hybrid-optimizer-state/1"))
    throw std::runtime_error(input + " is not an orthojit optimizer state (metadata orthojit.format is missing or unknown)");
  auto text = [&](const char* key) {
    auto found = file.metadata.find(key);
    return found == file.metadata.end() ? std::string() : found->second;
  };
  ConversionReport report;
  report.from = saved_momentum_kind(format->second, text("orthojit.preset"), text("orthojit.momentum_kind"));
  report.factor = momentum_conversion_factor(report.from, to, beta);
  const std::string suffix = ".momentum_buffer";
  for (NamedTensor& tensor : file.tensors) {
    if (tensor.name.size() <= suffix.size() || tensor.name.compare(tensor.name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    if (tensor.dtype != "F32") throw std::runtime_error(input + ": '" + tensor.name + "' is " + tensor.dtype + ", expected F32");
    const size_t count = tensor.bytes.size() / sizeof(float);
    for (size_t i = 0; i < count; ++i) {
      float value;
      std::memcpy(&value, tensor.bytes.data() + i * sizeof(float), sizeof(float));
      value = static_cast<float>(static_cast<double>(value) * report.factor);
      std::memcpy(tensor.bytes.data() + i * sizeof(float), &value, sizeof(float));
    }
    ++report.buffers;
  }
  char beta_text[32];
  std::snprintf(beta_text, sizeof beta_text, "%.17g", beta);
  file.metadata["orthojit.format"] = kStateFormat;
  file.metadata["orthojit.momentum_kind"] = to_string(to);
  file.metadata["orthojit.momentum"] = beta_text;
  write_safetensors(output, file.tensors, file.metadata);
  return report;
}

}  // namespace orthojit::runtime
