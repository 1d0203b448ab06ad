// The Gram restart search (see gram_restart_search.h).
#include "autotune/gram_restart_search.h"

#include "autotune/json_integer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

#include "passes/pipeline.h"
#include "support/source_location.h"

namespace orthojit::autotune {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The scalar Gram iteration for singular value x (apply_strategy's schedule on a 1x1 "matrix"
// whose formed R is x² + δ): `on_q(k, q)` after every step k. Stops and returns false at the first
// Q that is not finite (an overflow, or inf − inf in p(r)).
template <typename OnQ>
bool walk_gram_iteration(const std::vector<std::vector<double>>& polynomials, const std::vector<char>& restart_before, double x, double perturbation,
                         OnQ&& on_q) {
  double q = 1, r = x * x + perturbation;
  for (size_t k = 0; k < polynomials.size(); ++k) {
    if (k > 0 && restart_before[k]) {
      x *= q;  // X ← Q·X: the singular value carried to this restart
      r = x * x + perturbation;
      q = 1;
    }
    const std::vector<double>& p = polynomials[k];
    double z = 0;
    for (size_t j = p.size(); j-- > 0;) z = z * r + p[j];  // Horner: Z = p_k(R)
    q *= z;
    r *= z * z;  // R ← Z·R·Z (an overflow here makes the next Q infinite, unless a restart forms R anew)
    if (!std::isfinite(q)) return false;
    if (!on_q(k, q)) return true;
  }
  return true;
}

std::vector<char> restart_mask(const std::vector<int>& restarts, size_t steps) {
  std::vector<char> mask(steps, 0);
  for (int restart : restarts)
    if (restart >= 1 && static_cast<size_t>(restart) < steps) mask[static_cast<size_t>(restart)] = 1;
  return mask;
}

// max |Q| over the spectrum; stops early (returning a value >= `stop_at`) once the running
// maximum reaches `stop_at`: such a set cannot beat the best one of its size.
double objective_until(const std::vector<std::vector<double>>& polynomials, const std::vector<int>& restarts, const std::vector<double>& spectrum,
                       double perturbation, double stop_at) {
  const std::vector<char> mask = restart_mask(restarts, polynomials.size());
  double largest = 0;
  for (double x : spectrum) {
    const bool finite = walk_gram_iteration(polynomials, mask, x, perturbation, [&](size_t, double q) {
      largest = std::max(largest, std::abs(q));
      return largest < stop_at;
    });
    if (!finite) return kInfinity;
    if (largest >= stop_at) return largest;
  }
  return largest;
}

nlohmann::json objective_json(double objective) {
  if (std::isfinite(objective)) return objective;
  return "inf";
}

std::string steps_text(int steps) { return std::to_string(steps) + (steps == 1 ? " step" : " steps"); }

}  // namespace

std::vector<double> restart_search_spectrum(const RestartSearchOptions& options) {
  if (!(options.sigma_max > 0) || !(options.sigma_min > 0) || options.sigma_min > options.sigma_max || options.points < 2)
    throw std::invalid_argument("restart search spectrum: need 0 < sigma_min <= sigma_max and at least 2 points");
  std::vector<double> spectrum(static_cast<size_t>(options.points));
  const double top = std::log10(options.sigma_max), bottom = std::log10(options.sigma_min);
  for (int i = 0; i < options.points; ++i)
    spectrum[static_cast<size_t>(i)] = std::pow(10.0, top + (bottom - top) * static_cast<double>(i) / static_cast<double>(options.points - 1));
  return spectrum;
}

std::vector<double> scalar_gram_q(const std::vector<std::vector<double>>& polynomials, const std::vector<int>& restarts, double x, double perturbation) {
  std::vector<double> q_by_step(polynomials.size(), kInfinity);
  walk_gram_iteration(polynomials, restart_mask(restarts, polynomials.size()), x, perturbation, [&](size_t k, double q) {
    q_by_step[k] = q;
    return true;
  });
  return q_by_step;
}

double restart_objective(const std::vector<std::vector<double>>& polynomials, const std::vector<int>& restarts, const std::vector<double>& spectrum,
                         double perturbation) {
  return objective_until(polynomials, restarts, spectrum, perturbation, kInfinity);
}

RestartChoice search_gram_restarts(const std::vector<std::vector<double>>& polynomials, ScalarType storage, const std::vector<int>& program_restarts,
                                   const RestartSearchOptions& options) {
  if (polynomials.empty()) throw std::invalid_argument("restart search: the program has no steps");
  const std::vector<double> spectrum = restart_search_spectrum(options);
  RestartChoice choice;
  choice.storage = to_string(storage);
  choice.perturbation = options.perturbation.value_or(-unit_roundoff(storage));
  choice.options = options;
  const int positions = static_cast<int>(polynomials.size()) - 1;  // 1..steps-1
  const int largest_size = options.max_restarts < 0 ? positions : std::min(options.max_restarts, positions);

  // Sizes in order while their sets fit in max_sets (size 0 always).
  double binomial = 1;  // C(positions, size)
  for (int size = 0; size <= largest_size; ++size) {
    if (size > 0) binomial = binomial * (positions - size + 1) / size;
    if (size > 0 && static_cast<double>(choice.sets_searched) + binomial > static_cast<double>(options.max_sets)) break;
    // Every set of this size in lexicographic order; the first of equal objectives stays.
    std::vector<int> set(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) set[static_cast<size_t>(i)] = i + 1;
    RestartSet best{{}, kInfinity};
    bool have_best = false;
    while (true) {
      const double objective = objective_until(polynomials, set, spectrum, choice.perturbation, have_best ? best.objective : kInfinity);
      ++choice.sets_searched;
      if (!have_best || objective < best.objective) {
        best = {set, objective};
        have_best = true;
      }
      int i = size - 1;  // next combination of `size` positions out of 1..positions
      while (i >= 0 && set[static_cast<size_t>(i)] == positions - (size - 1 - i)) --i;
      if (i < 0) break;
      ++set[static_cast<size_t>(i)];
      for (int j = i + 1; j < size; ++j) set[static_cast<size_t>(j)] = set[static_cast<size_t>(j - 1)] + 1;
    }
    choice.best_per_count.push_back(best);
  }

  // Across sizes: the chosen set so far, replaced by a larger size's best only when that is worth
  // its extra products.
  const RestartSet* chosen = &choice.best_per_count.front();
  for (const RestartSet& candidate : choice.best_per_count) {
    if (&candidate == chosen) continue;
    const double extra = static_cast<double>(candidate.positions.size() - chosen->positions.size());
    const bool better = std::isfinite(candidate.objective) &&
                        (!std::isfinite(chosen->objective) || candidate.objective * std::pow(options.gain_per_restart, extra) <= chosen->objective);
    if (better) chosen = &candidate;
  }
  choice.positions = chosen->positions;
  choice.objective = chosen->objective;
  std::vector<int> own = program_restarts;
  std::sort(own.begin(), own.end());
  choice.program = {own, restart_objective(polynomials, own, spectrum, choice.perturbation)};
  return choice;
}

nlohmann::json RestartChoice::to_json() const {
  nlohmann::json per_count = nlohmann::json::array();
  for (const RestartSet& set : best_per_count) per_count.push_back({{"restarts", set.positions}, {"max_abs_q", objective_json(set.objective)}});
  return {{"restarts", positions},
          {"max_abs_q", objective_json(objective)},
          {"best_per_count", per_count},
          {"program", {{"restarts", program.positions}, {"max_abs_q", objective_json(program.objective)}}},
          {"storage", storage},
          {"perturbation", perturbation},
          {"spectrum", {{"sigma_max", options.sigma_max}, {"sigma_min", options.sigma_min}, {"points", options.points}, {"spacing", "log"}}},
          {"gain_per_restart", options.gain_per_restart},
          {"sets_searched", sets_searched},
          {"objective", "max over the spectrum and the steps of |Q| in the scalar Gram iteration with R = x^2 + perturbation "
                        "(Dao-AILab/gram-newton-schulz, restart_autotune.py)"}};
}

std::vector<std::vector<double>> program_step_polynomials(const dsl::Program& program, std::optional<ScalarType> precision) {
  passes::CompileOptions options;  // the standard form on a small shape: recognition only needs the steps
  options.rows = 2;
  options.cols = 4;
  options.precision = precision;
  const ir::Function function = passes::compile_program(program, options);
  std::vector<std::vector<double>> polynomials;
  for (size_t k = 0; k < function.steps.size(); ++k) {
    const ir::StepInfo& info = function.steps[k];
    if (!info.recognized)
      throw CompileError(info.blocker, "the gram restart search needs every step in the form X <- p(X·Xᵀ)·X, but step " + std::to_string(k) + " of " +
                                           program.name + " is not: " + (info.blocker_reason.empty() ? "this statement breaks the form" : info.blocker_reason));
    polynomials.push_back(info.polynomial);
  }
  return polynomials;
}

std::vector<int> checked_restart_positions(const std::vector<int>& positions, int steps) {
  std::vector<int> sorted;
  std::set<int> seen;
  for (int position : positions) {
    if (steps < 2)
      throw std::invalid_argument("restart position " + std::to_string(position) + " is not valid: the program has " + steps_text(steps) +
                                  ", so no restart fits (a restart happens before a step other than the first; use none)");
    if (position < 1 || position >= steps)
      throw std::invalid_argument("restart position " + std::to_string(position) + " is outside 1.." + std::to_string(steps - 1) +
                                  ": the program has " + steps_text(steps) + " (0.." + std::to_string(steps - 1) +
                                  ") and a restart happens before the step with its index");
    if (!seen.insert(position).second) throw std::invalid_argument("restart position " + std::to_string(position) + " is given twice");
    sorted.push_back(position);
  }
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

RestartRequest parse_restart_request(const std::string& text, int steps) {
  RestartRequest request;
  if (text == "auto") {
    request.mode = RestartRequest::Mode::Auto;
    return request;
  }
  if (text == "program") return request;
  request.mode = RestartRequest::Mode::Explicit;
  if (text == "none") return request;
  const std::string valid = "expected auto, none, program, or comma-separated step indices in 1.." + std::to_string(std::max(steps - 1, 1)) +
                            " (e.g. 2 or 2,4)";
  std::vector<int> positions;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    bool digits = !part.empty() && part.size() <= 6;
    for (char c : part) digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (!digits) throw std::invalid_argument("invalid restarts '" + text + "': " + (part.empty() ? "an empty position" : "'" + part + "' is not a step index") + "; " + valid);
    positions.push_back(std::stoi(part));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  try {
    request.positions = checked_restart_positions(positions, steps);
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument("invalid restarts '" + text + "': " + error.what());
  }
  return request;
}

std::optional<std::vector<int>> recorded_restarts(const nlohmann::json& entry, int steps) {
  if (!entry.is_object() || !entry.contains("gram_restarts")) return std::nullopt;
  const nlohmann::json& field = entry.at("gram_restarts");
  if (!field.is_array()) throw std::invalid_argument("the record's gram_restarts is not a list of step indices: " + field.dump());
  std::vector<int> positions;
  for (const auto& value : field) {
    if (!value.is_number_integer()) throw std::invalid_argument("the record's gram_restarts holds " + value.dump() + ", not a step index");
    positions.push_back(json_int(value, "the record's gram_restarts entry"));  // beyond int: refused, not wrapped into some index
  }
  try {
    return checked_restart_positions(positions, steps);
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(std::string("the record's gram_restarts ") + field.dump() + ": " + error.what());
  }
}

std::string restarts_text(const std::vector<int>& positions) {
  if (positions.empty()) return "none";
  std::string text = "[";
  for (size_t i = 0; i < positions.size(); ++i) text += (i ? "," : "") + std::to_string(positions[i]);
  return text + "]";
}

std::string restarts_note(const std::optional<std::vector<int>>& positions) {
  return positions ? ", gram restarts " + restarts_text(*positions) : std::string();
}

}  // namespace orthojit::autotune
