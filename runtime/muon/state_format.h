// The saved form of the hybrid optimizer's state (HybridOptimizer::save_state, orthojit.Muon's
// state_dict) and what it takes to read an older one. Format 2 records the momentum form
// (ema | sum) and β the buffers were made with; format 1 did not, and its keller preset used the
// 2024 sum form (buf ← β·buf + g) that KellerJordan/Muon replaced by the EMA (buf.lerp_(g, 1−β))
// in early 2025. A state whose buffers are in the other form than the optimizer's is refused,
// never silently reinterpreted: the two differ by 1/(1−β) (20× at β = 0.95).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/safetensors_file.h"

namespace orthojit::runtime {

inline constexpr const char* kStateFormat = "hybrid-optimizer-state/2";

// The momentum form of a saved state, from its format, preset and (format 2) momentum_kind.
// Throws std::runtime_error for a momentum_kind that is neither ema nor sum.
MomentumKind saved_momentum_kind(const std::string& format, const std::string& preset, const std::string& momentum_kind);

// Why `where` cannot be loaded into an optimizer whose momentum is `wanted`, and the two ways on.
std::string momentum_mismatch_message(const std::string& where, const std::string& format, MomentumKind saved, MomentumKind wanted);

// The state file save_state writes and load_state reads, for any optimizer holding `owners`'
// state (DeviceOptimizer stages its device state through these; DistributedOptimizer streams its
// partitions into the same layout): per owner in order, Muon "<name>.momentum_buffer" (and a
// variant's tensors), AdamW "<name>.exp_avg", "<name>.exp_avg_sq" and the I64 "<name>.step"; the
// metadata of state_file_metadata. Both stream through the file, holding no copy of the state.
void write_state_file(const std::string& path, const std::vector<StateOwner>& owners, const std::map<std::string, HybridOptimizer::State>& state,
                      const OptimizerSettings& settings, int64_t steps_taken, const FileProgressCallback& progress = {});
// Checks every tensor against `owners` and the settings' momentum form, throws
// std::runtime_error saying what does not match (nothing is returned then), and sets `steps_taken`.
std::map<std::string, HybridOptimizer::State> read_state_file(const std::string& path, const std::vector<StateOwner>& owners,
                                                              const OptimizerSettings& settings, int64_t& steps_taken,
                                                              const FileProgressCallback& progress = {});

// The pieces of those two, for writers and readers of a part of the state: the file's tensors in
// order, pointing into `state` (null pointers when `state` is null: the layout alone; throws
// std::invalid_argument when a buffer's size does not match its tensor's shape), its metadata,
// and the checks of a file's header against `owners` (returns the steps taken).
std::vector<TensorSource> state_file_tensors(const std::vector<StateOwner>& owners, const std::map<std::string, HybridOptimizer::State>* state,
                                             MuonVariant variant);
std::map<std::string, std::string> state_file_metadata(const OptimizerSettings& settings, int64_t steps_taken);
int64_t check_state_file(const SafetensorsHeader& header, const std::string& path, const std::vector<StateOwner>& owners, const OptimizerSettings& settings);

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
// `progress` reports the input's reads and the output's commit (its "checksum" and "sync").
ConversionReport convert_state_momentum(const std::string& input, const std::string& output, MomentumKind to, double beta,
                                        const FileProgressCallback& progress = {});

}  // namespace orthojit::runtime
