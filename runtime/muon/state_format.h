// The saved form of the hybrid optimizer's state (HybridOptimizer::save_state, orthojit.Muon's
// state_dict) and what it takes to read an older one. Format 2 records the momentum form
// (ema | sum) and β the buffers were made with; format 1 did not, and its keller preset used the
// 2024 sum form (buf ← β·buf + g) that KellerJordan/Muon replaced by the EMA (buf.lerp_(g, 1−β))
// in early 2025. A state whose buffers are in the other form than the optimizer's is refused,
// never silently reinterpreted: the two differ by 1/(1−β) (20× at β = 0.95).
#pragma once

#include <string>

#include "runtime/muon/optimizer_settings.h"

namespace orthojit::runtime {

inline constexpr const char* kStateFormat = "hybrid-optimizer-state/2";

// The momentum form of a saved state, from its format, preset and (format 2) momentum_kind.
// Throws std::runtime_error for a momentum_kind that is neither ema nor sum.
MomentumKind saved_momentum_kind(const std::string& format, const std::string& preset, const std::string& momentum_kind);

// Why `where` cannot be loaded into an optimizer whose momentum is `wanted`, and the two ways on.
std::string momentum_mismatch_message(const std::string& where, const std::string& format, MomentumKind saved, MomentumKind wanted);

// Rewrites a saved safetensors state with its momentum buffers converted to `to` (each element
// multiplied by momentum_conversion_factor in f64, rounded once to f32), as format 2. `beta` is
// the momentum the buffers were made with (it cannot be read from a format 1 file). The output
// is written atomically; the input is never changed. Throws std::runtime_error on a file that is
// not an orthojit state, std::invalid_argument on beta outside [0, 1).
struct ConversionReport {
  MomentumKind from = MomentumKind::Sum;
  int buffers = 0;
  double factor = 1;
};
ConversionReport convert_state_momentum(const std::string& input, const std::string& output, MomentumKind to, double beta);

}  // namespace orthojit::runtime
