// Names of the tuner's options and statuses (see tuning_options.h).
#include "autotune/tuning_options.h"

#include <stdexcept>

namespace orthojit::autotune {

const char* to_string(TuneBackend backend) { return backend == TuneBackend::Cuda ? "cuda" : "cpu"; }

std::optional<TuneBackend> parse_tune_backend(std::string_view text) {
  if (text == "cpu") return TuneBackend::Cpu;
  if (text == "cuda") return TuneBackend::Cuda;
  return std::nullopt;
}

namespace {
constexpr std::pair<TrialStatus, const char*> kStatusNames[] = {
    {TrialStatus::Pending, "pending"},           {TrialStatus::Ok, "ok"},
    {TrialStatus::Pruned, "pruned"},             {TrialStatus::WrongResult, "wrong_result"},
    {TrialStatus::CompileFailed, "compile_failed"}, {TrialStatus::RunFailed, "run_failed"},
    {TrialStatus::SkippedBudget, "skipped_budget"},
};
}  // namespace

const char* to_string(TrialStatus status) {
  for (const auto& [value, name] : kStatusNames)
    if (value == status) return name;
  return "pending";
}

std::optional<TrialStatus> parse_trial_status(std::string_view text) {
  for (const auto& [value, name] : kStatusNames)
    if (text == name) return value;
  return std::nullopt;
}

std::optional<cpu::ProductEngine> parse_product_engine(std::string_view text) {
  for (cpu::ProductEngine engine : {cpu::ProductEngine::Jit, cpu::ProductEngine::OpenBlas, cpu::ProductEngine::OneDnn})
    if (text == cpu::to_string(engine)) return engine;
  return std::nullopt;
}

ir::StrategyKind parse_strategy_or_throw(const std::string& text, const std::string& what) {
  if (auto kind = ir::parse_strategy(text)) return *kind;
  throw std::invalid_argument(what + ": unknown strategy '" + text + "' (expected standard or gram)");
}

}  // namespace orthojit::autotune
