// The CLI's own command-line parsing: `--name value`, `--name=value` and boolean `--flag`, checked
// against the options a command declares, with errors that name the bad option, and the option
// values only the CLI takes. What Python parses too is runtime/shared_options.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/orthogonalize.h"
#include "runtime/shared_options.h"  // the option values Python takes too: shapes, precisions, plan modes

namespace orthojit::cli {

class Arguments {
 public:
  // `valued`: options that take a value; `flags`: boolean options. Throws runtime::UsageError.
  Arguments(const std::vector<std::string>& args, const std::set<std::string>& valued, const std::set<std::string>& flags);
  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string require(const std::string& name) const;  // throws UsageError when missing

 private:
  std::map<std::string, std::string> values_;
};

// A non-negative integer option value. Throws UsageError.
int parse_count(const std::string& text, const std::string& option);
// --threads: 0 (one per logical core) or 1 to cpu::kMaxThreads; UsageError otherwise.
// --seed: a whole number from 0 to 2^64 - 1 (std::stoull took "-1" as 2^64 - 1 and "1.5" as 1).
uint64_t parse_seed(const std::string& text);
int parse_threads(const std::string& text);
// --budget SECONDS: a positive number, or `fallback` when absent. Throws UsageError.
double parse_budget(const std::optional<std::string>& text, double fallback);

// "2" or "2,3" or "" (no restarts). Throws UsageError.
std::vector<int> parse_int_list(const std::string& text, const std::string& option);

// The options of one orthogonalization that `run` and `bench` share: --strategy, --restarts,
// --precision, --backend (auto when absent), --isa (cpu only), --kernel, --threads, --variant
// (cuda only), each checked here. Throws UsageError.
runtime::OrthogonalizeOptions orthogonalize_options(const Arguments& arguments);

}  // namespace orthojit::cli
