// The preset table (runtime/muon/presets.h). The settings of each are in preset_settings
// (optimizer_settings.cpp), which every name here must be (tests/muon_presets_test.cpp).
#include "runtime/muon/presets.h"

namespace orthojit::runtime {

const std::vector<MuonPreset>& muon_presets() {
  static const std::vector<MuonPreset> presets = {
      {"deepspeed", "DeepSpeed's ZeRO Muon: EMA momentum, Gram Newton-Schulz in f16 (restart after step 2), trailing matrices of 3-D+ tensors",
       "deepspeed/runtime/zero/muon/original_muon.py, muon_optimizer.py"},
      {"keller", "Keller Jordan's Muon: EMA momentum, standard Newton-Schulz in bf16, trailing matrices of 3-D+ tensors",
       "KellerJordan/Muon muon.py"},
      {"moonlight", "Moonshot's Muon: summed momentum, lr scaled by 0.2*sqrt(max(rows, cols)), AdamW with eps outside the bias correction",
       "MoonshotAI/Moonlight examples/toy_train.py"},
      {"torch", "torch.optim.Muon: EMA momentum, the norm clamped at eps, torch.optim.AdamW's defaults for the rest",
       "torch/optim/_muon.py (PyTorch >= 2.9)"},
  };
  return presets;
}

std::string muon_preset_list() {
  std::string names;
  for (const MuonPreset& preset : muon_presets()) names += (names.empty() ? "" : ", ") + std::string(preset.name);
  return names;
}

}  // namespace orthojit::runtime
