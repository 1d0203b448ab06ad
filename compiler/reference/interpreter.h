// The float64 reference interpreter: evaluates scheduled IR with each stored value rounded to its
// declared type (round-to-nearest-even to bf16, f16, f32). Sums are exact-order f64, so its bf16
// result is what a correct bf16 kernel produces up to accumulation-order error. Every backend is
// tested against it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ir/function.h"

namespace orthojit::reference {

// `input` holds `function.batch` matrices of the user's shape (function.input_shape), row-major,
// one after the other. Returns the outputs in the same layout. Uses the buffer plan when the
// function has one (so a planning bug shows up as a wrong result), otherwise one slot per value.
// Throws std::invalid_argument when `input` has the wrong size, std::logic_error on unspecialized IR.
std::vector<double> interpret(const ir::Function& function, const std::vector<double>& input);

// The plain f64 dot products of a product: sums[i·n + j] = Σ_k a[i·K + k] · b_t[j·K + k] (A
// row-major (m, K), B given as Bᵀ row-major (n, K)). Everything around them (α, β, γ, rounding to
// the storage types, symmetry) stays the interpreter's. The autotuner plugs in an f64 BLAS here to
// check large candidates in seconds instead of minutes; the default is the interpreter's own loop.
using ProductHook = std::function<void(int64_t m, int64_t n, int64_t k, const double* a, const double* b_t, double* sums)>;
std::vector<double> interpret(const ir::Function& function, const std::vector<double>& input, const ProductHook& products);

// A Muon step (function.muon_step set): one MuonStepMatrix per batch item with host pointers to
// its gradient (the spec's grad type), f32 momentum (updated in place) and parameter (the
// spec's param type, updated in place), each addressed like the user's row-major matrix. The
// momentum and update run in f64 with the roundings of ir/muon_step.h; O is the last X rounded
// to f32, as an orthogonalizer's output is. Throws std::invalid_argument for a wrong count.
void interpret_muon_step(const ir::Function& function, const std::vector<ir::MuonStepMatrix>& matrices, const ProductHook& products = {});

}  // namespace orthojit::reference
