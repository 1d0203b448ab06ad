// A saved optimizer state, summarized (see state_summary.h).
#include "runtime/muon/state_summary.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/errors.h"
#include "runtime/muon/state_format.h"

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
  // What the optimizers that read the file would refuse, said here: a state that cannot be loaded
  // is not intact, whatever its checksum says (exit 2, each problem named).
  std::vector<std::string> problems;
  auto meta = [&](const char* key) -> const std::string* {
    const auto found = header.metadata.find(key);
    return found == header.metadata.end() ? nullptr : &found->second;
  };
  const std::string& format = *meta("orthojit.format");
  if (format != kStateFormat && format != "hybrid-optimizer-state/1")
    problems.push_back("orthojit.format '" + format + "' is not one this build reads (" + kStateFormat + " or hybrid-optimizer-state/1)");
  if (const std::string* kind = meta("orthojit.momentum_kind"); kind && !parse_momentum_kind(*kind))
    problems.push_back("orthojit.momentum_kind '" + *kind + "' is not ema or sum");
  if (const std::string* beta = meta("orthojit.momentum")) {
    char* end = nullptr;
    const double value = std::strtod(beta->c_str(), &end);
    if (beta->empty() || *end != '\0' || !(value >= 0 && value < 1)) problems.push_back("orthojit.momentum '" + *beta + "' is not a number in [0, 1)");
  }
  if (const std::string* steps = meta("orthojit.steps_taken");
      steps && (steps->empty() || steps->size() > 18 || steps->find_first_not_of("0123456789") != std::string::npos))
    problems.push_back("orthojit.steps_taken '" + *steps + "' is not a whole number");
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
    const bool count = key == "step" || key == "variant_step";
    if ((kMuonKeys.count(key) || kAdamKeys.count(key)) && (count ? tensor.dtype != "I64" || !tensor.shape.empty() : tensor.dtype != "F32"))
      problems.push_back("'" + tensor.name + "' is " + tensor.dtype + (count ? " of " + std::to_string(tensor.shape.size()) + " dimension(s), expected one I64" : ", expected F32"));
    if (key == "momentum_buffer" && tensor.dtype == "F32") {
      summary.muon.emplace_back(parameter, elements_of(tensor.shape));
    } else if (key == "exp_avg" && tensor.dtype == "F32") {
      summary.adam.emplace_back(parameter, elements_of(tensor.shape));
    } else if (key == "step" && tensor.dtype == "I64" && tensor.shape.empty()) {
      int64_t steps = 0;
      reader.read(tensor, 0, &steps, sizeof steps);
      if (steps < 0) problems.push_back("'" + tensor.name + "' is " + std::to_string(steps) + ", a negative step count");
      summary.adam_steps_min = std::min(summary.adam_steps_min, steps);
      summary.adam_steps_max = std::max(summary.adam_steps_max, steps);
    } else if (!kMuonKeys.count(key) && !kAdamKeys.count(key)) {
      summary.unknown.push_back(tensor.name);
    }
  }
  if (summary.adam.empty()) summary.adam_steps_min = 0;
  if (!problems.empty()) {
    std::string listed;
    for (const std::string& problem : problems) listed += "\n  " + problem;
    throw UsageError(path + " is not an optimizer state orthojit can load:" + listed);
  }
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
