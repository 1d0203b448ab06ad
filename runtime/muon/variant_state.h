// The saved form of a Muon variant's state (muon_variants.h) in the optimizer's state file:
// "<param>.second_momentum_buffer" (NorMuon, F32 (batch·rows, 1)) or "<param>.v_buffer" (AdaMuon,
// F32, the parameter's shape) and "<param>.variant_step" (AdaMuon, I64 scalar), next to the
// momentum buffer, and the metadata key orthojit.muon_variant (absent in older files: muon).
// A state saved under another variant is refused with a message naming both and the setting.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/safetensors_file.h"

namespace orthojit::runtime {

inline constexpr const char* kMuonVariantKey = "orthojit.muon_variant";

// Appends owner's variant tensors, pointing into `state` (null pointers when `state` is null: the
// layout alone).
void add_variant_state_tensors(std::vector<TensorSource>& tensors, const StateOwner& owner, const HybridOptimizer::State* state, MuonVariant variant);

// Throws std::runtime_error when the file's variant is not `wanted` and the optimizer has Muon
// parameters (whose state depends on it); `where` names the file.
void check_saved_variant(const std::map<std::string, std::string>& metadata, const std::string& where, MuonVariant wanted, bool has_muon);

// Reads owner's variant tensors through `take` (name, dtype, shape, where the checked tensor's
// bytes go).
using TakeTensor = std::function<void(const std::string& name, const char* dtype, const std::vector<int64_t>& shape, void* out)>;
void read_variant_state(HybridOptimizer::State& state, const StateOwner& owner, MuonVariant variant, const TakeTensor& take);

}  // namespace orthojit::runtime
