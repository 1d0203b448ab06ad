// Where Gram Newton–Schulz restarts, chosen per coefficient schedule (orthojit issue 17, item 4).
//
// The gram strategy (compiler/passes/apply_strategy.cpp) iterates on R = X·Xᵀ and accumulates
// Q = Π p_k(R); before a restart step it forms X ← Q·X, R ← X·Xᵀ and starts Q again at I. In
// 16-bit storage, R carries a rounding error of about u·‖R‖ (u the storage's unit roundoff), so a
// tiny singular value σ of X shows up in R as σ² + δ with δ ≈ −u: negative for σ² < u. The
// polynomials then do not shrink that component towards a fixed point but blow it up (r ← r·z²
// with z = p(r) > a for r < 0), and Q — whose rounding error is about u·max|Q| relative to the
// output — grows with it. A restart rebuilds R from the current X, which resets the error.
//
// The search follows Dao-AILab's restart autotuner (github.com/Dao-AILab/gram-newton-schulz,
// gram_newton_schulz/restart_autotune.py, find_best_restarts): the scalar Gram iteration is run for
// each singular value x of a log-spaced spectrum (1 down to 1e-10 there) with r = x² + δ at the
// start and after every restart (there x ← q·x), q and r updated per step as q ← q·z, r ← r·z²
// with z = p_k(r); the objective is the largest |Q| over every step and every x, minimized over
// the restart sets of a given size. orthojit's own implementation differs where the table in
// docs/autotuning.md ("Gram restarts") says: δ comes from the storage type (−u; Dao-AILab's
// fixed −4e-4 is f16's −2⁻¹¹ = −4.9e-4 rounded), the steps' polynomials may have any degree, and
// the set sizes are searched together, a larger set winning only when it divides the objective
// by `gain_per_restart` per extra restart (each costs one extra product, X ← Q·X, and its new R).
// Doubles replace Dao-AILab's 100-digit decimals: a trajectory that overflows is infinite there
// and here alike, and any finite objective beats it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsl/ast.h"
#include "support/scalar_type.h"

namespace orthojit::autotune {

struct RestartSearchOptions {
  double sigma_max = 1.0, sigma_min = 1e-10;  // the spectrum: `points` values log-spaced from sigma_max down to sigma_min
  int points = 2000;
  std::optional<double> perturbation;  // δ added to x² in every formed R; default: −unit_roundoff(storage) (support/scalar_type.h)
  int max_restarts = -1;               // largest set size searched (-1: steps - 1, as far as max_sets allows)
  size_t max_sets = 4096;              // the sizes are searched in order until their sets would exceed this many
  // A set with more restarts replaces the one chosen so far only when its objective is smaller by
  // at least this factor per extra restart: one bit of Q's error bound u·max|Q| for one product.
  double gain_per_restart = 2.0;
};

// One restart set and its objective: max over the spectrum and the steps of |Q_k(x)|.
struct RestartSet {
  std::vector<int> positions;  // steps before which the iteration restarts, ascending, in 1..steps-1
  double objective = 0;        // +inf when a trajectory overflows (or turns NaN)
};

struct RestartChoice {
  std::vector<int> positions;              // the chosen set
  double objective = 0;                    // its objective
  std::vector<RestartSet> best_per_count;  // the best set of each size searched (size 0 first)
  RestartSet program;                      // the program's own restarts, for comparison
  double perturbation = 0;
  std::string storage;
  RestartSearchOptions options;  // the search's spectrum and rule
  size_t sets_searched = 0;
  nlohmann::json to_json() const;  // what a tuning record stores as "restart_search"
};

// The log-spaced spectrum of `options` (sigma_max first).
std::vector<double> restart_search_spectrum(const RestartSearchOptions& options);

// The scalar Gram iteration for one singular value x: Q after every step (q_by_step[k] is Q after
// step k, reset to 1 at a restart). `polynomials[k]` = [p0, p1, ..., pd] with Z = Σ p_j·R^j.
// Non-finite values stay non-finite from where they appear.
std::vector<double> scalar_gram_q(const std::vector<std::vector<double>>& polynomials, const std::vector<int>& restarts, double x, double perturbation);

// max over `spectrum` and the steps of |Q| (scalar_gram_q), +inf when any value is not finite.
double restart_objective(const std::vector<std::vector<double>>& polynomials, const std::vector<int>& restarts, const std::vector<double>& spectrum,
                         double perturbation);

// The search: every set of each size from 0 (in lexicographic order; the first of equal
// objectives wins, as in Dao-AILab's loop), then across sizes, smallest first: a larger size's
// best replaces the set chosen so far when its objective times gain_per_restart^(extra restarts)
// is at most the chosen one's (a finite objective always beats an infinite one). `program_restarts` is evaluated for the
// record. Deterministic. Throws std::invalid_argument for an empty schedule.
RestartChoice search_gram_restarts(const std::vector<std::vector<double>>& polynomials, ScalarType storage, const std::vector<int>& program_restarts,
                                   const RestartSearchOptions& options = {});

// The step polynomials p_k of a program as the gram strategy uses them (odd-polynomial
// recognition on the lowered steps). Throws CompileError when a step is not of the form
// X ← p(X·Xᵀ)·X (then gram, and a restart search, does not apply).
std::vector<std::vector<double>> program_step_polynomials(const dsl::Program& program, std::optional<ScalarType> precision);

// Checks explicit positions for a program of `steps` steps: each an integer in 1..steps-1, no
// repeats. Returns them sorted. Throws std::invalid_argument saying which value is wrong and what
// is valid.
std::vector<int> checked_restart_positions(const std::vector<int>& positions, int steps);

// What `tune --restarts` / `orthojit.tune(restarts=...)` asked for.
struct RestartRequest {
  enum class Mode { Program, Auto, Explicit };  // the program's own, the search's, the given positions
  Mode mode = Mode::Program;
  std::vector<int> positions;  // Explicit (empty: no restarts)
};
// "auto", "none" (no restarts), "program" (the default), or comma-separated step indices ("2",
// "2,4"). The indices are
// checked against the program's step count by checked_restart_positions. Throws
// std::invalid_argument naming the bad text and the valid forms.
RestartRequest parse_restart_request(const std::string& text, int steps);

// The restarts a tuning record's entry asks for: its "gram_restarts" field, or nullopt when the
// entry has none (a record written before restarts were tuned: the program's own apply). Throws
// std::invalid_argument when the field is malformed or outside 1..steps-1.
std::optional<std::vector<int>> recorded_restarts(const nlohmann::json& entry, int steps);

// "[2,4]", or "none" for no restarts.
std::string restarts_text(const std::vector<int>& positions);
// ", gram restarts [2,4]" for a recorded set, "" for nullopt: the tail of a tuned choice's reason.
std::string restarts_note(const std::optional<std::vector<int>>& positions);

}  // namespace orthojit::autotune
