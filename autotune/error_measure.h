// How far an orthogonalizer's output is from the float64 reference: the one measure the CPU and
// CUDA tuners judge candidates by and tests/cuda_device_test.cpp judges GPU variants by.
//
// Why not the relative Frobenius distance alone: it averages over the whole output, so local
// corruption hides in it. One 16x16 tile zeroed in a 512x2048 bf16 output is a relative
// Frobenius error of 0.0155 (1/sqrt(4096 tiles)), well inside the old 3e-2 bf16 bound. (A wrong
// matrix of a batch went unseen for another reason: only the first was compared; see
// reference_check.h.) The measure here is local: every 16x16 tile of every matrix (partial tiles
// at the edges) is judged on its own, by its largest elementwise error relative to the reference
// tile's own RMS. Zeroing a tile makes that ratio max|r|/rms(r) >= 1 whatever the values (2.2 to
// 5.1 over the tiles of a Gaussian matrix's polar factor; 3.3 measured on a 512x2048 bf16
// output); a transposed, shifted or swapped tile makes it about sqrt(2)·max|r|/rms(r) (6.5 for a
// transposed 256x256 output); a correct output stays a small multiple of the storage type's unit
// roundoff (0.13 on that 512x2048; the bounds, their argument and the values measured are in
// error_measure.cpp). The per-matrix relative Frobenius distance is kept next to it, with the old
// bounds, for diffuse errors (a slightly wrong coefficient or normalization moves every element a
// little: the largest tile error then is only about 5x the Frobenius one, 0.28 against 0.05 for a
// matrix scaled by 1.05, so the tile bound alone would let 3x more through).
//
// Depends only on compiler/ (no autotune/ library): tests/cuda_device_test.cpp compiles this file
// in the CUDA-only build of the GPU machines, where autotune/ is not built.
#pragma once

#include <cstdint>
#include <string>

#include "ir/function.h"
#include "support/scalar_type.h"

namespace orthojit::autotune {

// Tiles are this many rows and columns of the output as the user sees it (row-major rows x cols).
inline constexpr int64_t kErrorTile = 16;

struct ErrorMeasure {
  // The worst tile of any matrix: max_{(i,j) in tile} |c_ij − r_ij| / scale(tile), where
  // scale(tile) = max(rms of the reference over the tile, kScaleFloor · rms of the whole matrix).
  double tile = 0;
  // The worst matrix: ‖c − r‖_F / ‖r‖_F.
  double frobenius = 0;
  int64_t tile_matrix = 0, tile_row = 0, tile_col = 0;  // where the worst tile starts (matrix: index among those measured)
  int64_t frobenius_matrix = 0;
  bool finite = true;  // false: a candidate value is NaN or infinite (then tile and frobenius are infinite)
  // Where finite is false (in matrix tile_matrix): how many values, how many of them still the
  // poison the outputs are filled with before a run (all bits set: never written), the first one.
  int64_t nonfinite_count = 0, poison_count = 0, first_nonfinite_row = 0, first_nonfinite_col = 0;
  // false: the f64 reference itself has a NaN or an infinity (the iteration overflows in this
  // storage type for this input), so no candidate can be judged against it; within() is false.
  bool reference_finite = true;
};

// The floor of a tile's scale, relative to its matrix's RMS: a tile whose reference values are
// tiny (not the case for Gaussian inputs: the tiles of their polar factors have 0.8 to 1.2 times
// the matrix's RMS, from 96x320 to 1024x4096) is not judged relative to almost nothing. A zeroed tile still fails
// whenever its RMS is at least this share of the matrix's.
inline constexpr double kScaleFloor = 0.25;

// `matrices` matrices of rows x cols, row-major, one after the other in both arrays.
ErrorMeasure measure_error(const float* candidate, const double* reference, int64_t rows, int64_t cols, int64_t matrices);

struct ErrorBounds {
  double tile = 0, frobenius = 0;
};

// What a correct output stays within, for values stored in `storage` with sums in `accumulate`
// and products of inner length up to `inner` (the long side). The argument, and the values
// measured on correct outputs, are in error_measure.cpp.
ErrorBounds error_bounds(ScalarType storage, ScalarType accumulate, int64_t inner);
// The same read off a scheduled function (its policy's storage and accumulate types, its long side).
ErrorBounds error_bounds(const ir::Function& function);

bool within(const ErrorMeasure& measure, const ErrorBounds& bounds);

// "tile error 1.2 (matrix 3, rows 16-31, cols 32-47) exceeds 0.2" or the Frobenius one, naming
// the first bound exceeded; empty when within both.
std::string describe_violation(const ErrorMeasure& measure, const ErrorBounds& bounds, int64_t rows, int64_t cols);

}  // namespace orthojit::autotune
