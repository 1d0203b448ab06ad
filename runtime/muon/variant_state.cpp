// The saved form of a Muon variant's state (see variant_state.h).
#include "runtime/muon/variant_state.h"

#include <cstring>
#include <stdexcept>

#include "runtime/muon/muon_variants.h"

namespace orthojit::runtime {

void add_variant_state_tensors(std::vector<NamedTensor>& tensors, const StateOwner& owner, const HybridOptimizer::State& state, MuonVariant variant) {
  if (variant == MuonVariant::Muon || !owner.muon) return;
  NamedTensor moment;
  moment.name = owner.name + variant_state_suffix(variant);
  moment.dtype = "F32";
  moment.shape = variant_state_shape(variant, owner.plan, owner.shape);
  moment.bytes.resize(state.second_moment.size() * sizeof(float));
  std::memcpy(moment.bytes.data(), state.second_moment.data(), moment.bytes.size());
  tensors.push_back(std::move(moment));
  if (!variant_counts_steps(variant)) return;
  NamedTensor step;
  step.name = owner.name + ".variant_step";
  step.dtype = "I64";
  step.bytes.resize(sizeof(int64_t));
  std::memcpy(step.bytes.data(), &state.variant_step, sizeof(int64_t));
  tensors.push_back(std::move(step));
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
  const NamedTensor& moment = take(owner.name + variant_state_suffix(variant), "F32", variant_state_shape(variant, owner.plan, owner.shape));
  state.second_moment.resize(moment.bytes.size() / sizeof(float));
  std::memcpy(state.second_moment.data(), moment.bytes.data(), state.second_moment.size() * sizeof(float));
  if (variant_counts_steps(variant)) std::memcpy(&state.variant_step, take(owner.name + ".variant_step", "I64", {}).bytes.data(), sizeof(int64_t));
}

}  // namespace orthojit::runtime
