// Singular values of a dense f64 matrix by one-sided Jacobi (Hestenes): accurate to a few ulps of
// the largest singular value, independent of the code under test. For tests and the demo.
#pragma once

#include <cstdint>
#include <vector>

namespace orthojit::reference {

// `matrix` is rows x cols, row-major. Returns min(rows, cols) values in descending order.
std::vector<double> singular_values(const std::vector<double>& matrix, int64_t rows, int64_t cols);

}  // namespace orthojit::reference
