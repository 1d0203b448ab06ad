// The input a user hands orthogonalize (the CLI's `run`, Python's orthogonalize), checked before
// any kernel runs: Newton–Schulz of a matrix with a NaN or an infinity is not defined (every
// output element would be NaN, silently), and a finite f64 value beyond float's range turns into
// an infinity when a backend reads it as f32.
#pragma once

#include <cstdint>
#include <string>

namespace orthojit::runtime {

// Throws UsageError naming the first offending element (matrix, row, column and value) of
// `batch` row-major rows x cols matrices at `values`, and what is valid. `float_range`: the backend
// reads f32 (cpu, cuda): |value| must also be at most float's largest (3.4e38).
void require_finite_input(const double* values, int64_t batch, int64_t rows, int64_t cols, bool float_range, const std::string& what);
void require_finite_input(const float* values, int64_t batch, int64_t rows, int64_t cols, const std::string& what);

}  // namespace orthojit::runtime
