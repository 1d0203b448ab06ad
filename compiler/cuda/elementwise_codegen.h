// The element-wise parts of a Muon + AdamW step as generated CUDA kernels, one per combination of
// storage types and formula (baked in), hyperparameters as launch arguments (a schedule changes
// no code):
//
//   oj_muon_momentum  M ← M + (1−β)(g − M) (EMA) or β·M + g (sum), in place (f32); U ← Nesterov
//                     (EMA g + β(M − g), sum g + β·M) or M, f32
//   oj_muon_apply     p ← p·decay − step_row·O, decay = 1 − lr·wd, step_row = lr·s of the row's
//                     block (a per-row f64 array, or one value for all rows), written in p's type
//   oj_adamw          m, v (f32, in place), then p ← p·decay − δ with the standard or the
//                     Moonlight formula
//   oj_accumulate     acc ← acc + g (f32, in place; the ZeRO step's gradient accumulation)
//   oj_divide         x ← x / d (f32, in place; the gradient average over the ranks)
//   oj_convert        d ← s in another storage type, rounded once (parameters to and from the
//                     f32 all-gather buffer)
//   oj_nonfinite      flag ← 1 when any element of g is a NaN or an infinity (the step's check
//                     before anything changes; the exponent bits, so fast math cannot drop it)
//
// The arithmetic is float64 in exactly the order of the C++ update rules
// (runtime/muon/update_rules.cpp: muon_momentum, apply_muon, adam_step), with _rn intrinsics that
// are never contracted, and every store rounds once (f64 → bf16/f16 through round-to-odd f32), so a
// kernel computes the bits the CPU rules compute (tests/cuda_elementwise_test.cpp runs the
// generated source in the host emulation against them). Grid-stride loops over 64-bit indices.
#pragma once

#include <string>

#include "support/scalar_type.h"

namespace orthojit::cuda {

struct MuonMomentumKernel {
  ScalarType grad = ScalarType::F32;  // f32 | bf16 | f16
  bool ema = true;
  bool nesterov = true;
};
struct MuonApplyKernel {
  ScalarType param = ScalarType::F32;
};
struct AdamWKernel {
  ScalarType grad = ScalarType::F32, param = ScalarType::F32;
  bool moonlight = false;  // (lr·√bc2/bc1)·m/(√v + eps) instead of lr·(m/bc1)/(√(v/bc2) + eps)
};

// CUDA C++ that includes "orthojit_device.cuh" and defines one extern "C" kernel of that name:
//   oj_muon_momentum(const G* g, float* m, float* u, double beta, long long count)
//   oj_muon_apply(P* p, const float* o, const double* row_step, double step, double decay,
//                 long long rows, long long cols, long long first, long long count)
//                 (row_step null: `step`; element i is element first + i of the parameter)
//   oj_adamw(const G* g, float* m, float* v, P* p, double beta1, double beta2, double lr,
//            double bias1, double bias2, double eps, double scale, double decay, long long count)
//            (scale = lr·√bias2/bias1, used by the Moonlight formula)
// G and P are float or unsigned short (16-bit bits). Throws std::invalid_argument for another type.
std::string generate_muon_momentum(const MuonMomentumKernel& kernel);

// The Muon formulas as __device__ functions (ir/muon_step.h, in the same f64 order), emitted
// into every kernel that computes them: the momentum kernel here and the Muon step's fused
// normalize and epilogue (cuda_codegen.cpp):
//   float oj_momentum_next(double g, double m, double beta)
//   float oj_update_value(double g, float next, double beta)
//   double oj_parameter_next(double p, double decay, double step, float o)
std::string muon_device_functions(bool ema, bool nesterov);
// `load` and `store` of one storage type as <prefix>_load(x) -> double and <prefix>_store(double)
// -> element (rounded once); and the element's C type ("float" or "oj::u16").
std::string storage_access_functions(const char* prefix, ScalarType type, const char* what);
const char* storage_element_type(ScalarType type);
std::string generate_muon_apply(const MuonApplyKernel& kernel);
std::string generate_adamw(const AdamWKernel& kernel);
// oj_nonfinite(const G* g, unsigned int* flag, long long count): writes 1 into *flag when an
// element's exponent bits are all ones (NaN or ±infinity), never 0 (the caller zeroes the flag),
// so one flag can collect any number of launches.
std::string generate_nonfinite_check(ScalarType grad);
// oj_accumulate(const G* g, float* acc, long long count), with G the gradient's storage;
// oj_divide(float* x, float divisor, long long count);
// oj_convert(const S* s, D* d, long long count).
std::string generate_accumulate(ScalarType grad);
std::string generate_divide();
// oj_sum_squares(const float* x, double* partials, long long count): thread t of the grid writes
// partials[t] = Σ x[i]² (f64, no FMA) over its grid-stride elements in order; the caller adds the
// partials in order (a deterministic sum: the gradient-clipping norm).
std::string generate_sum_squares();
std::string generate_convert(ScalarType from, ScalarType to);

}  // namespace orthojit::cuda
