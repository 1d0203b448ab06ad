// `orthojit memory --model CONFIG.json`: optimizer-state memory of a model under AdamW alone and
// under hybrid Muon + AdamW (runtime/muon/memory_accounting.h).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "autotune/json_depth.h"
#include "cli/arguments.h"
#include "cli/commands.h"
#include "runtime/model_config.h"
#include "runtime/muon/memory_accounting.h"

namespace orthojit::cli {


const char* const kMemoryHelp = R"(usage: orthojit memory --model CONFIG.json [--json] [--per-head] [--tied-embeddings auto|yes|no]

Optimizer-state memory of a Hugging Face model (its config.json) under AdamW alone and under the
hybrid Muon + AdamW optimizer: parameters by role (Muon: hidden matrices; AdamW: embeddings and
lm_head, and the 1-D norms and biases, computed from the config), optimizer-state bytes per group
and in total (f32: AdamW 8 bytes per parameter for m and v, Muon 4 for its momentum), the
reduction and Muon's share of the parameters.

options:
  --model CONFIG.json      the model's config.json ("default": a small embedded Llama-style model)
  --json                   print the same as JSON
  --per-head               list q/k/v as per-head blocks (Muon split; the counts do not change)
  --tied-embeddings MODE   auto (the config's tie_word_embeddings; GPT-2 ties by default), yes or no;
                           tied embeddings are one tensor, counted once
)";

int memory_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"model", "tied-embeddings"}, {"json", "per-head"});
  const std::string path = arguments.require("model");
  runtime::MemoryOptions options;
  options.per_head = arguments.has("per-head");
  const std::string tied = arguments.get("tied-embeddings").value_or("auto");
  if (tied == "yes") options.tied_embeddings = true;
  else if (tied == "no") options.tied_embeddings = false;
  else if (tied != "auto") throw runtime::UsageError("invalid --tied-embeddings '" + tied + "'; expected auto, yes or no");

  const std::string text = runtime::read_model_config(path);
  if (const std::string deep = autotune::json_depth_problem(text); !deep.empty()) throw runtime::UsageError(path + ": " + deep);
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw runtime::UsageError(path + " is not valid JSON: " + error.what());
  }
  runtime::MemoryReport report;
  try {
    report = runtime::account_memory(config, options);
  } catch (const std::invalid_argument& error) {
    throw runtime::UsageError(path + ": " + error.what());
  } catch (const nlohmann::json::exception& error) {
    // A field of a type the accounting does not check by name ("model_type": 5): the file's fault.
    throw runtime::UsageError(path + ": a field has the wrong type (" + std::string(error.what()) + ")");
  }
  if (arguments.has("json")) {
    nlohmann::json json = runtime::to_json(report);
    json["config"] = path;
    std::printf("%s\n", json.dump(2).c_str());
  } else {
    std::fputs(runtime::format_memory_report(report).c_str(), stdout);
  }
  return 0;
}

}  // namespace orthojit::cli
