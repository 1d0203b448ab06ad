// The Muon variants that rescale the orthogonalized matrix with a second moment (the setting
// muon.variant; docs/muon.md "Variants"). Both run on the host path of the hybrid optimizer:
// momentum and U as Muon (update_rules.h), O = NS(U) per block, the variant's rescaling of O
// here, then apply_muon's p ← p·(1 − lr·wd) − lr·s·O' with the group's lr adjustment s.
//
// NorMuon (Li et al., "NorMuon: Making Muon more efficient and scalable", arXiv 2510.05491;
// normuon_update in zichongli5/NorMuon normuon.py, also in modded-nanogpt and microsoft/dion),
// for every orthogonalized block O (rows r × cols c):
//     ‖O‖ = Frobenius norm of O
//     v_i ← v_i + (1 − β2)·(mean_j O_ij² − v_i)          one f32 value per row i (lerp_)
//     O'_ij = O_ij / (√v_i + eps)
//     O'' = O' · ‖O‖ / (‖O'‖ + eps)                        the update keeps O's norm
//   β2 0.95, eps 1e-10 (both places), no bias correction; normuon.py then scales by
//   sqrt(max(1, r/c)) (lr_adjust = original, the default).
//
// AdaMuon (Si, Zhang, Shen, "AdaMuon: Adaptive Muon Optimizer", arXiv 2507.11005;
// Chongjie-Si/AdaMuon adamuon.py), per parameter step t (counted per parameter):
//     O = NS(sign(U)) (the paper's sign-stabilized update; sign_momentum = false: NS(U) as
//         adamuon.py, whose code has no sign)
//     v ← β2·v + (1 − β2)·O²                               element-wise, f32 (mul_ + addcmul_)
//     Ô = O / (√(v / (1 − β2^t)) + eps)
//     O' = Ô · √min(r, c) / (‖Ô‖ + eps)
//   β2 0.999, eps 1e-8 (both places). adamuon.py steps p by lr·0.2·√max(r, c)·O': that is
//   O' with lr_adjust = match_rms_adamw (0.2·√max(r, c)); the product 0.2·√(r·c)/‖Ô‖ is the
//   paper's RMS-aligned rescaling (update RMS 0.2, as AdamW's).
//
// The arithmetic is f64 per element, rounded once to f32 for the state and for O'.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/parameter.h"
#include "runtime/muon/parameter_tagging.h"

namespace orthojit::runtime {

class BlockOrthogonalizer;

// β2 and eps in force: the settings' values, else the variant's published defaults.
double variant_beta2(const MuonGroupSettings& muon);
double variant_eps(const MuonGroupSettings& muon);

// The second moment a variant keeps for a parameter of `plan`: NorMuon one value per row of
// every matrix (batch·rows), AdaMuon one per element, Muon none. AdaMuon also counts its steps.
int64_t variant_state_elements(MuonVariant variant, const MatrixPlan& plan);
bool variant_counts_steps(MuonVariant variant);
// The saved tensor: "<param>.second_momentum_buffer" (NorMuon, shape (batch·rows, 1): normuon.py's
// p[..., 0:1] for a matrix) or "<param>.v_buffer" (AdaMuon, the parameter's shape), as the
// reference implementations name them; AdaMuon's step count is "<param>.variant_step" (I64).
std::string variant_state_suffix(MuonVariant variant);
std::vector<int64_t> variant_state_shape(MuonVariant variant, const MatrixPlan& plan, const std::vector<int64_t>& parameter_shape);

// sign(x) in place (0 stays 0, as torch.sign).
void sign_in_place(float* values, int64_t count);

// The variants' rescaling of O (the whole parameter, indexed like it) in place, block by block;
// `second_moment` holds variant_state_elements values, `step` is AdaMuon's count (already
// incremented, >= 1).
void normuon_rescale(const MuonGroupSettings& muon, const MatrixPlan& plan, float* orthogonal, float* row_second_moment);
void adamuon_rescale(const MuonGroupSettings& muon, const MatrixPlan& plan, int64_t step, float* orthogonal, float* second_moment);

// One Muon step of a parameter under muon.variant (normuon or adamuon): momentum, U (sign(U)
// for AdaMuon with sign_momentum), O = NS(U) per block, the rescaling, the parameter update.
// `gradient` is indexed like the parameter, in its own type (f32, bf16 or f16: read as it is,
// no f32 copy); momentum and second_moment change in place.
void variant_muon_step(const MuonGroupSettings& muon, const MatrixPlan& plan, BlockOrthogonalizer& orthogonalizer, DType grad_type, const void* gradient,
                       float* momentum, float* second_moment, int64_t step, DType type, void* data);
inline void variant_muon_step(const MuonGroupSettings& muon, const MatrixPlan& plan, BlockOrthogonalizer& orthogonalizer, const float* gradient,
                              float* momentum, float* second_moment, int64_t step, DType type, void* data) {
  variant_muon_step(muon, plan, orthogonalizer, DType::F32, gradient, momentum, second_moment, step, type, data);
}

}  // namespace orthojit::runtime
