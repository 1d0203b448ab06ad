// Command-line option parsing.
#include "cli/arguments.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include <cctype>
#include <sstream>

#include "cpu/thread_pool.h"

namespace orthojit::cli {

Arguments::Arguments(const std::vector<std::string>& args, const std::set<std::string>& valued, const std::set<std::string>& flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) != 0) throw runtime::UsageError("unexpected argument '" + arg + "'; options start with --");
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (flags.count(name)) {
      if (inline_value) throw runtime::UsageError("option --" + name + " takes no value");
      values_[name] = "";
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) throw runtime::UsageError("option --" + name + " needs a value");
        value = args[++i];
      }
      values_[name] = value;
    } else {
      std::string known;
      for (const auto& option : valued) known += " --" + option;
      for (const auto& option : flags) known += " --" + option;
      throw runtime::UsageError("unknown option --" + name + "; this command accepts:" + known);
    }
  }
}

bool Arguments::has(const std::string& name) const { return values_.count(name) > 0; }

std::optional<std::string> Arguments::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Arguments::require(const std::string& name) const {
  auto value = get(name);
  if (!value) throw runtime::UsageError("missing required option --" + name);
  return *value;
}

int parse_count(const std::string& text, const std::string& option) {
  bool digits = !text.empty() && text.size() <= 6;
  for (char c : text) digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
  if (!digits) throw runtime::UsageError("invalid --" + option + " '" + text + "'; expected a whole number from 0 to 999999");
  return std::stoi(text);
}

int parse_threads(const std::string& text) {
  const int threads = parse_count(text, "threads");
  if (threads > cpu::kMaxThreads)
    throw runtime::UsageError("invalid --threads '" + text + "'; expected 0 (one per logical core) or 1 to " + std::to_string(cpu::kMaxThreads));
  return threads;
}

uint64_t parse_seed(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 20 && text.find_first_not_of("0123456789") == std::string::npos;
  errno = 0;
  const unsigned long long value = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE) throw runtime::UsageError("invalid --seed '" + text + "'; expected a whole number from 0 to 18446744073709551615");
  return value;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& option) {
  std::vector<int> values;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    bool digits = !part.empty() && part.size() <= 6;
    for (char c : part) digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (!digits) throw runtime::UsageError("invalid --" + option + " '" + text + "'; expected comma-separated whole numbers, e.g. 2 or 2,4");
    values.push_back(std::stoi(part));
  }
  return values;
}

double parse_budget(const std::optional<std::string>& text, double fallback) {
  if (!text) return fallback;
  char* end = nullptr;
  const double budget = std::strtod(text->c_str(), &end);
  if (end == text->c_str() || *end != '\0' || !(budget > 0)) throw runtime::UsageError("--budget must be a positive number of seconds, got '" + *text + "'");
  return budget;
}

runtime::OrthogonalizeOptions orthogonalize_options(const Arguments& arguments) {
  runtime::OrthogonalizeOptions options;
  options.backend = arguments.get("backend").value_or("auto");
  if (auto strategy = arguments.get("strategy")) {
    runtime::parse_strategy_option(*strategy);  // refused here, before any input is read
    options.strategy = *strategy;
  }
  if (auto restarts = arguments.get("restarts")) options.gram_restarts = parse_int_list(*restarts, "restarts");
  if (auto precision = arguments.get("precision")) {
    options.precision = parse_scalar_type(*precision);
    if (!options.precision) throw runtime::UsageError("unknown precision '" + *precision + "'; expected bf16, f16, f32 or f64");
  }
  if (auto isa = arguments.get("isa")) {
    // As --kernel: the cpu backend's (ref and cuda would ignore it).
    if (options.backend == "ref" || options.backend == "cuda")
      throw runtime::UsageError("--isa " + *isa + " is an option of the cpu backend (this run is on " + options.backend + ")");
    options.cpu_isa = *isa;
  }
  if (auto kernel = arguments.get("kernel")) options.cpu_kernel = *kernel;
  if (auto threads = arguments.get("threads")) options.threads = parse_threads(*threads);
  if (auto variant = arguments.get("variant")) {
    if (options.backend != "cuda") throw runtime::UsageError("--variant is an option of --backend cuda");
    options.cuda_variant = *variant;
  }
  return options;
}

}  // namespace orthojit::cli
