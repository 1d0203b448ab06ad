// The saved form of a Muon variant's state (see variant_state.h).
#include "runtime/muon/variant_state.h"

#include <cstring>
#include <stdexcept>

#include "runtime/muon/muon_variants.h"

namespace orthojit::runtime {

void add_variant_state_tensors(std::vector<TensorSource>& tensors, const StateOwner& owner, const HybridOptimizer::State* state, MuonVariant variant) {
  if (variant == MuonVariant::Muon || !owner.muon) return;
  tensors.push_back({{owner.name + variant_state_suffix(variant), "F32", variant_state_shape(variant, owner.plan, owner.shape)},
                     state ? state->second_moment.data() : nullptr});
  if (variant_counts_steps(variant)) tensors.push_back({{owner.name + ".variant_step", "I64", {}}, state ? &state->variant_step : nullptr});
}

void check_saved_variant(const std::map<std::string, std::string>& metadata, const std::string& where, MuonVariant wanted, bool has_muon) {
  const auto found = metadata.find(kMuonVariantKey);
  const std::string saved = found == metadata.end() ? "muon" : found->second;
  if (!parse_muon_variant(saved))
    throw std::runtime_error("optimizer state " + where + ": metadata " + kMuonVariantKey + " = '" + saved + "' is not muon, normuon or adamuon");
  if (!has_muon || saved == to_string(wanted)) return;
  throw std::runtime_error("optimizer state " + where + " was saved by the Muon variant '" + saved + "' but this optimizer runs '" + to_string(wanted) +
                           "' (their second-moment state differs); nothing was loaded. Load it with the setting muon.variant = " + saved);
}

void read_variant_state(HybridOptimizer::State& state, const StateOwner& owner, MuonVariant variant, const TakeTensor& take) {
  if (variant == MuonVariant::Muon || !owner.muon) return;
  const std::vector<int64_t> shape = variant_state_shape(variant, owner.plan, owner.shape);
  int64_t elements = 1;
  for (int64_t dimension : shape) elements *= dimension;
  state.second_moment.resize(static_cast<size_t>(elements));
  take(owner.name + variant_state_suffix(variant), "F32", shape, state.second_moment.data());
  if (variant_counts_steps(variant)) take(owner.name + ".variant_step", "I64", {}, &state.variant_step);
}

}  // namespace orthojit::runtime
