// `orthojit inspect-state`: what a saved optimizer state holds and whether its data is intact
// (runtime/muon/state_summary.h), before a run resumes from it or a checkpoint is kept.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/file_progress_option.h"
#include "runtime/muon/state_summary.h"

namespace orthojit::cli {

const char* const kInspectStateHelp = R"(usage: orthojit inspect-state --input FILE [--tensors] [--json] [--no-verify] [--progress]

What a saved optimizer state holds: its format and settings (preset, steps taken, momentum form
and beta, Muon variant), its Muon and AdamW parameters with their element counts and the AdamW
step counts, the param_groups orthojit.Muon or DistributedMuon saved with it, and whether its
data matches the SHA-256 it records (every byte is read: about a second per GB from the page
cache). Any orthojit state file: the C++ and C optimizers', the distributed optimizer's (one file
for any world size) and the Python optimizers'. Exit 0 when the file is intact, 2 when it is not
(or is not an optimizer state), with the reason.

options:
  --input FILE   the saved state (save_state / oj_optimizer_save_state)
  --tensors      list every tensor (name, dtype, shape)
  --json         the summary as one JSON object (keys: path, metadata, data_bytes, muon, adam,
                 adam_steps, unknown, checksum, checksum_verified, tensors)
  --no-verify    read the header only (the data is not read, the checksum not checked)
  --progress     report the verification's progress on stderr even when it is not a terminal
                 (a line when it ends, with the rate); on a terminal it is always shown
)";

namespace {

std::string shape_of(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

int64_t total_elements(const std::vector<std::pair<std::string, int64_t>>& parameters) {
  int64_t total = 0;
  for (const auto& parameter : parameters) total += parameter.second;
  return total;
}

std::string metadata_value(const runtime::StateFileSummary& summary, const std::string& key, const std::string& absent) {
  const auto found = summary.metadata.find(key);
  return found == summary.metadata.end() ? absent : found->second;
}

// "muon-params (lr 0.02, momentum 0.95, ...)" for each saved group; the JSON text when it is not
// a list of groups.
std::string groups_text(const std::string& json) {
  const nlohmann::json groups = nlohmann::json::parse(json, nullptr, false);
  if (!groups.is_array()) return json;
  std::string text;
  for (const nlohmann::json& group : groups) {
    if (!group.is_object()) return json;
    std::string values;
    for (const auto& [key, value] : group.items()) {
      if (key == "params" || key == "param_names" || key == "name") continue;
      values += (values.empty() ? "" : ", ") + key + " " + value.dump();
    }
    text += (text.empty() ? "" : "; ") + group.value("name", std::string("group")) + " (" + values + ")";
  }
  return text;
}

}  // namespace

int inspect_state_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"input"}, {"tensors", "json", "no-verify", "progress"});
  const std::string input = arguments.require("input");
  const bool verify = !arguments.has("no-verify");
  std::unique_ptr<runtime::ProgressLine> progress = file_progress_line(arguments, "verifying " + input);
  const runtime::StateFileSummary summary = runtime::summarize_state_file(input, verify, callback_of(progress));
  if (progress) progress->finish();
  if (arguments.has("json")) {
    std::printf("%s\n", runtime::state_summary_json(summary).dump(2).c_str());
    return 0;
  }
  const std::string size = runtime::byte_size_text(summary.data_bytes);
  std::printf("%s: orthojit optimizer state %s, %zu tensors, %s of data\n", input.c_str(), metadata_value(summary, "orthojit.format", "?").c_str(),
              summary.tensors.size(), size.c_str());
  std::printf("  preset %s; %s steps taken; momentum: %s form, beta %s; Muon variant %s\n", metadata_value(summary, "orthojit.preset", "(not recorded)").c_str(),
              metadata_value(summary, "orthojit.steps_taken", "0").c_str(), metadata_value(summary, "orthojit.momentum_kind", "(format 1: the preset's)").c_str(),
              metadata_value(summary, "orthojit.momentum", "(not recorded)").c_str(), metadata_value(summary, "orthojit.muon_variant", "muon").c_str());
  std::printf("  Muon parameters: %zu (%lld elements)\n", summary.muon.size(), static_cast<long long>(total_elements(summary.muon)));
  std::printf("  AdamW parameters: %zu (%lld elements)", summary.adam.size(), static_cast<long long>(total_elements(summary.adam)));
  if (!summary.adam.empty()) {
    if (summary.adam_steps_min == summary.adam_steps_max) std::printf(", step %lld", static_cast<long long>(summary.adam_steps_min));
    else std::printf(", steps %lld to %lld", static_cast<long long>(summary.adam_steps_min), static_cast<long long>(summary.adam_steps_max));
  }
  std::printf("\n");
  const std::string groups = metadata_value(summary, "orthojit.python.param_groups", "");
  if (!groups.empty()) std::printf("  param_groups: %s\n", groups_text(groups).c_str());
  if (!summary.unknown.empty())
    std::printf("  %zu tensor(s) of neither kind, e.g. '%s': not written by orthojit, which will refuse to load it\n", summary.unknown.size(),
                summary.unknown.front().c_str());
  if (arguments.has("tensors"))
    for (const runtime::TensorPlace& tensor : summary.tensors)
      std::printf("    %s  %s  %s\n", tensor.name.c_str(), tensor.dtype.c_str(), shape_of(tensor.shape).c_str());
  if (summary.checksum.empty()) std::printf("  checksum: none recorded (a file from before checksums; nothing to verify)\n");
  else if (!verify) std::printf("  checksum: SHA-256 %s, not verified (--no-verify)\n", summary.checksum.c_str());
  else std::printf("  checksum: SHA-256 %s, verified (%s read)\n", summary.checksum.c_str(), size.c_str());
  return 0;
}

}  // namespace orthojit::cli
