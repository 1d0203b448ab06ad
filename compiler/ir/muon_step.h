// The element-wise parts of a Muon step as the IR carries them (the `momentum` and `update` ops,
// function.h), their formulas, and the per-step arguments every backend reads.
//
//   momentum  M ← M + (1−β)(g − M)   (EMA: Keller Jordan's Muon since 2025, torch.optim.Muon)
//             M ← β·M + g            (sum: DeepSpeed, Moonlight, the older KellerJordan/Muon)
//             U = g + β(M − g) (EMA Nesterov) | g + β·M (sum Nesterov) | M (no Nesterov)
//   update    p ← p·decay − step·O,  decay = 1 − lr·wd,  step = lr·s (s the shape's lr scale)
//
// Arithmetic is float64 in this order, the f32 state and U rounded once each, the parameter
// rounded once to its type: the same bits as the host rules (runtime/muon/update_rules.cpp calls
// these functions) and the generated CUDA (cuda_codegen.cpp emits the same order with
// uncontracted f64 intrinsics). The hyperparameters are run-time arguments, not compiled in, so a
// learning-rate or momentum schedule never recompiles.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "support/f16_bits.h"
#include "support/rounding.h"
#include "support/scalar_type.h"

namespace orthojit::ir {

// What a Muon step compiles in: the momentum form and the storage types of g and p. M and U are
// always f32 (the state format's).
struct MuonStepSpec {
  bool ema = true;
  bool nesterov = true;
  ScalarType grad = ScalarType::F32;   // f32 | bf16 | f16
  ScalarType param = ScalarType::F32;  // f32 | bf16 | f16
  std::string describe() const;        // "ema nesterov, grad bf16, param bf16"
  bool operator==(const MuonStepSpec&) const = default;
};

// Empty when the spec can be compiled, else why not (types other than f32/bf16/f16).
std::string muon_step_spec_problem(const MuonStepSpec& spec);

// One matrix of a Muon step: where its gradient, momentum (both addressed like the user's
// rows x cols matrix, row-major) and parameter live, and its scalars. Host pointers for the ref
// and cpu backends, device pointers (CUdeviceptr) for cuda.
struct MuonStepMatrix {
  std::uintptr_t grad = 0, momentum = 0, param = 0;
  double beta = 0.95, step = 0.0, decay = 1.0;
};

// The argument block the generated kernels read, kMuonStepWords 64-bit words per matrix in this
// order: grad, momentum, param (pointers), beta, step, decay (IEEE doubles' bits).
constexpr int kMuonStepWords = 6;
std::vector<uint64_t> pack_muon_step_arguments(const std::vector<MuonStepMatrix>& matrices);

// The formulas, one definition for every host-side user.
inline float muon_momentum_next(bool ema, double beta, double g, double m) {
  return static_cast<float>(ema ? m + (1.0 - beta) * (g - m) : beta * m + g);
}
inline float muon_update_value(bool ema, bool nesterov, double beta, double g, float next) {
  if (!nesterov) return next;
  return static_cast<float>(ema ? g + beta * (static_cast<double>(next) - g) : g + beta * static_cast<double>(next));
}
inline double muon_parameter_next(double p, double decay, double step, float orthogonal) {
  return p * decay - step * static_cast<double>(orthogonal);
}

// Element access in a storage type (f32, bf16, f16 bit patterns) through f64, the store rounding
// once to nearest even.
double load_stored(ScalarType type, const void* base, int64_t index);
void store_rounded(ScalarType type, void* base, int64_t index, double value);

// The same for a type known at compile time, inline (what per-element loops call; load_stored and
// store_rounded are these behind a switch, so there is one definition).
template <ScalarType T>
inline double load_stored_as(const void* base, int64_t index) {
  if constexpr (T == ScalarType::F32) return static_cast<const float*>(base)[index];
  else if constexpr (T == ScalarType::BF16) return std::bit_cast<float>(static_cast<uint32_t>(static_cast<const uint16_t*>(base)[index]) << 16);
  else if constexpr (T == ScalarType::F16) return static_cast<double>(f16_bits_to_float(static_cast<const uint16_t*>(base)[index]));
  else return static_cast<const double*>(base)[index];
}
template <ScalarType T>
inline void store_rounded_as(void* base, int64_t index, double value) {
  if constexpr (T == ScalarType::F32) {
    static_cast<float*>(base)[index] = static_cast<float>(value);
  } else if constexpr (T == ScalarType::BF16) {
    const float rounded = static_cast<float>(round_to_known<ScalarType::BF16>(value));  // exact in f32
    static_cast<uint16_t*>(base)[index] = static_cast<uint16_t>(std::bit_cast<uint32_t>(rounded) >> 16);
  } else if constexpr (T == ScalarType::F16) {
    // Rounded once, in f64, to the f16 grid: the f32 conversion and f16_bits_of are then exact.
    static_cast<uint16_t*>(base)[index] = f16_bits_of(static_cast<float>(round_to_known<ScalarType::F16>(value)));
  } else {
    static_cast<double*>(base)[index] = value;
  }
}

// Calls body(std::integral_constant<ScalarType, T>{}) for the storage type `type`: a loop over
// elements dispatches once, then runs on load_stored_as / store_rounded_as.
template <typename Body>
decltype(auto) with_stored_type(ScalarType type, Body&& body) {
  switch (type) {
    case ScalarType::F32: return body(std::integral_constant<ScalarType, ScalarType::F32>{});
    case ScalarType::BF16: return body(std::integral_constant<ScalarType, ScalarType::BF16>{});
    case ScalarType::F16: return body(std::integral_constant<ScalarType, ScalarType::F16>{});
    case ScalarType::F64: break;
  }
  return body(std::integral_constant<ScalarType, ScalarType::F64>{});
}

}  // namespace orthojit::ir
