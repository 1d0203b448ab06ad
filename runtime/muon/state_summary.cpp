// A saved optimizer state, summarized (see state_summary.h).
#include "runtime/muon/state_summary.h"

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>

#include "runtime/errors.h"

namespace orthojit::runtime {
namespace {

int64_t elements_of(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dimension : shape) count *= dimension;
  return count;
}

// The key after the parameter's name ("layers.0.w.exp_avg" -> "exp_avg"), or empty.
std::string key_of(const std::string& tensor, std::string& parameter) {
  const size_t dot = tensor.rfind('.');
  if (dot == std::string::npos || dot == 0) return {};
  parameter = tensor.substr(0, dot);
  return tensor.substr(dot + 1);
}

}  // namespace

StateFileSummary summarize_state_file(const std::string& path, bool verify, const FileProgressCallback& progress) {
  SafetensorsReader reader(path);
  const SafetensorsHeader& header = reader.header();
  if (!header.metadata.count("orthojit.format")) {
    std::string held = std::to_string(header.tensors.size()) + " tensor(s)";
    if (!header.tensors.empty()) held += ", the first '" + header.tensors.front().name + "'";
    throw UsageError(path + " is a safetensors file but not an orthojit optimizer state (no metadata orthojit.format; it holds " + held +
                             "): a model's weights, or another program's state?");
  }
  StateFileSummary summary;
  summary.path = path;
  summary.metadata = header.metadata;
  summary.tensors = header.tensors;
  summary.data_bytes = header.data_bytes;
  summary.checksum = header.checksum.value_or("");
  // Muon's buffers and a variant's (variant_state.h); AdamW's moments and step count.
  static const std::set<std::string> kMuonKeys = {"momentum_buffer", "second_momentum_buffer", "v_buffer", "variant_step"};
  static const std::set<std::string> kAdamKeys = {"exp_avg", "exp_avg_sq", "step"};
  summary.adam_steps_min = std::numeric_limits<int64_t>::max();
  summary.adam_steps_max = 0;
  for (const TensorPlace& tensor : header.tensors) {
    std::string parameter;
    const std::string key = key_of(tensor.name, parameter);
    if (key == "momentum_buffer" && tensor.dtype == "F32") {
      summary.muon.emplace_back(parameter, elements_of(tensor.shape));
    } else if (key == "exp_avg" && tensor.dtype == "F32") {
      summary.adam.emplace_back(parameter, elements_of(tensor.shape));
    } else if (key == "step" && tensor.dtype == "I64" && tensor.shape.empty()) {
      int64_t steps = 0;
      reader.read(tensor, 0, &steps, sizeof steps);
      summary.adam_steps_min = std::min(summary.adam_steps_min, steps);
      summary.adam_steps_max = std::max(summary.adam_steps_max, steps);
    } else if (!kMuonKeys.count(key) && !kAdamKeys.count(key)) {
      summary.unknown.push_back(tensor.name);
    }
  }
  if (summary.adam.empty()) summary.adam_steps_min = 0;
  if (verify) {
    reader.set_progress(progress);  // the pass over the data, not the few step counts read above
    reader.verify_checksum();
    summary.checksum_verified = !summary.checksum.empty();
  }
  return summary;
}

nlohmann::json state_summary_json(const StateFileSummary& summary) {
  nlohmann::json out = {{"path", summary.path},
                        {"metadata", summary.metadata},
                        {"data_bytes", summary.data_bytes},
                        {"adam_steps", {summary.adam_steps_min, summary.adam_steps_max}},
                        {"unknown", summary.unknown},
                        {"checksum", summary.checksum},
                        {"checksum_verified", summary.checksum_verified}};
  auto parameters = [](const std::vector<std::pair<std::string, int64_t>>& list) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& [name, elements] : list) rows.push_back({{"name", name}, {"elements", elements}});
    return rows;
  };
  out["muon"] = parameters(summary.muon);
  out["adam"] = parameters(summary.adam);
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorPlace& tensor : summary.tensors) tensors.push_back({{"name", tensor.name}, {"dtype", tensor.dtype}, {"shape", tensor.shape}});
  out["tensors"] = tensors;
  return out;
}

}  // namespace orthojit::runtime
