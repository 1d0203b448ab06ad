// What the CUDA generators (cuda_codegen.cpp and hopper_codegen.cpp for the per-op kernels,
// fused_small_codegen.cpp for the fused small-matrix kernel) write kernels with: how a matrix is
// addressed (StridedMatrix, which each generator's view extends with where the matrix starts),
// the device storage tag of a type, and literals that round-trip.
#pragma once

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/cuda_codegen.h"
#include "support/scalar_type.h"

namespace orthojit::cuda {

// A matrix of `type` values as a kernel addresses it: element (i, j) at i·row_stride + j·col_stride
// from the matrix's start.
struct StridedMatrix {
  ScalarType type = ScalarType::F32;
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 1;
};
// The same values read as the transpose: rows and columns swapped with their strides (any view
// that extends StridedMatrix; where the matrix starts is unchanged).
template <class MatrixView>
MatrixView transposed_view(MatrixView view) {
  std::swap(view.rows, view.cols);
  std::swap(view.row_stride, view.col_stride);
  return view;
}

// A node's value as the per-op kernels address it: element (i, j) of matrix z at
// slot + z·matrix_stride + i·row_stride + j·col_stride.
struct View : StridedMatrix {
  Slot slot;
  int64_t matrix_stride = 0;
  View transposed() const { return transposed_view(*this); }
};

// One product D = α·A·B + β·C + γ·I as generate_cuda sees it, whichever kernel runs it (the
// mma.sync tile's and the sm_90a tile's requests extend it).
struct ProductRequest {
  std::string kernel;  // the entry kernel's name
  View a, b, c, d;     // c ignored without has_c; d ignored with fused_update
  bool has_c = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool triangular = false;    // D symmetric: the upper tiles only, each value stored twice
  bool fused_update = false;  // a Muon step's parameter update in the epilogue instead of a D store
  double alpha = 1, beta = 0, gamma = 0;
};

// Whether the device headers store `type` (orthojit_device_primitives.cuh's oj::Bf16, oj::F16, oj::F32).
inline bool device_storable(ScalarType type) { return type == ScalarType::BF16 || type == ScalarType::F16 || type == ScalarType::F32; }

// The device header type that loads and stores `type` ("oj::Bf16", ...).
inline const char* storage_tag(ScalarType type) {
  switch (type) {
    case ScalarType::BF16: return "oj::Bf16";
    case ScalarType::F16: return "oj::F16";
    case ScalarType::F32: return "oj::F32";
    default: throw std::invalid_argument("the cuda backend stores bf16, f16 or f32 values, not " + std::string(to_string(type)));
  }
}

// An f32 constant: the value rounded to f32, printed so that it reads back as that f32.
inline std::string literal(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9gf", static_cast<double>(static_cast<float>(value)));
  std::string result = text;
  if (result.find_first_of(".eEn") == std::string::npos) result.insert(result.size() - 1, ".0");
  return result;
}

inline std::string ll(int64_t value) { return std::to_string(value) + "LL"; }

// A double constant that round-trips (std::to_string would print 1e-7 as 0.000000), always a
// floating literal (3 prints as 3.0).
inline std::string f64_literal(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", value);
  std::string result = text;
  if (result.find_first_of(".eEn") == std::string::npos) result += ".0";
  return result;
}

// A constant of the accumulator type a kernel reduces in: double (f64 norms) or float.
inline std::string accumulator_literal(double value, bool f64) { return f64 ? f64_literal(value) : literal(value); }

// `sum + factor·value` in f32 (or f64), each operation rounded on its own: NVRTC compiles with
// --fmad=true and would contract a plain `sum += factor * value` into one FMA, which the host
// emulation (-ffp-contract=off) and the CPU backend do not, so the device would not give their
// bits. The primitives are __fadd_rn/__fmul_rn (orthojit_device_primitives.cuh).
inline std::string rounded_add_product(const std::string& sum, const std::string& factor, const std::string& value, bool f64 = false) {
  const char* kind = f64 ? "f64" : "f32";
  return std::string("oj::") + kind + "_add(" + sum + ", oj::" + kind + "_mul(" + factor + ", " + value + "))";
}
inline std::string rounded_add(const std::string& a, const std::string& b, bool f64 = false) {
  return std::string("oj::") + (f64 ? "f64" : "f32") + "_add(" + a + ", " + b + ")";
}
inline std::string rounded_product(const std::string& factor, const std::string& value) { return "oj::f32_mul(" + factor + ", " + value + ")"; }

}  // namespace orthojit::cuda
