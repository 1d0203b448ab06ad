// Published Newton–Schulz coefficients. Every number here is copied from
// its published source, listed for each set in docs/dsl.md §5 (papers and repositories).
#include "dsl/coefficient_sets.h"

#include <cmath>

namespace orthojit::dsl {

const std::vector<NamedCoefficientSet>& named_coefficient_sets() {
  static const std::vector<NamedCoefficientSet> sets = [] {
    const Triple jordan{3.4445, -4.7750, 2.0315};
    std::vector<NamedCoefficientSet> all;
    all.push_back({"jordan", "Keller Jordan's Muon; DeepSpeed; torch.optim.Muon", {jordan}});
    all.push_back({"polar_express_5",
                   "Polar Express (arXiv 2505.16932) as used in modded-nanogpt",
                   {{8.156554524902461, -22.48329292557795, 15.878769915207462},
                    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
                    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
                    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
                    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}}});
    all.push_back({"classical", "the classical quintic Newton–Schulz (15/8, -10/8, 3/8)",
                   {{15.0 / 8.0, -10.0 / 8.0, 3.0 / 8.0}}});
    all.push_back({"cans_step1", "CANS (arXiv 2506.10935), first step", {{8.4703, -25.1081, 18.6293}}});
    // NVIDIA-NeMo/Emerging-Optimizers emerging_optimizers/orthogonalized_optimizers/muon_utils.py,
    // _COEFFICIENT_SETS["cans"] and ["aol"] (the sets Megatron's emerging optimizers name).
    all.push_back({"cans",
                   "CANS (arXiv 2506.10935), Remez + adaptive interval, as in NVIDIA Emerging-Optimizers",
                   {{8.4703, -25.1081, 18.6293},
                    {4.1828, -3.1087, 0.5806},
                    {3.9619, -2.9541, 0.5630},
                    {3.2866, -2.4647, 0.5074},
                    {2.2737, -1.6447, 0.4162}}});
    all.push_back({"aol",
                   "Turbo-Muon (arXiv 2512.04632) after AOL preconditioning, thib-s/flash-newton-schulz via NVIDIA Emerging-Optimizers",
                   {{4.0098, -7.0585, 2.4635}, {3.4585, -5.5479, 2.5959}, {2.7573, -3.2939, 1.4254}, {2.7215, -3.0494, 1.3169}}});
    std::vector<Triple> deepseek(8, jordan);
    deepseek.push_back({2.0, -1.5, 0.5});
    deepseek.push_back({2.0, -1.5, 0.5});
    all.push_back({"deepseek_v4", "DeepSeek-V4 schedule as ported in microsoft/dion PR #67", deepseek});
    return all;
  }();
  return sets;
}

const NamedCoefficientSet* find_coefficient_set(std::string_view name) {
  for (const auto& set : named_coefficient_sets())
    if (set.name == name) return &set;
  return nullptr;
}

Triple scale_for_safety(const Triple& triple, double safety) {
  return {triple.a / safety, triple.b / std::pow(safety, 3), triple.c / std::pow(safety, 5)};
}

}  // namespace orthojit::dsl
