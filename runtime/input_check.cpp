// Input checks (see input_check.h).
#include "runtime/input_check.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "runtime/orthogonalize.h"

namespace orthojit::runtime {
namespace {

template <typename T>
void check(const T* values, int64_t batch, int64_t rows, int64_t cols, bool float_range, const std::string& what) {
  const int64_t count = batch * rows * cols;
  const double largest = std::numeric_limits<float>::max();
  for (int64_t i = 0; i < count; ++i) {
    const double v = static_cast<double>(values[i]);
    const bool bad = !std::isfinite(v);
    if (!bad && !(float_range && std::fabs(v) > largest)) continue;
    const int64_t matrix = i / (rows * cols), row = i % (rows * cols) / cols, col = i % cols;
    char value[64];
    std::snprintf(value, sizeof value, "%.9g", v);
    const std::string where = what + ": element (" + (batch > 1 ? std::to_string(matrix) + ", " : "") + std::to_string(row) + ", " +
                              std::to_string(col) + ") is " + value;
    if (bad)
      throw UsageError(where + "; orthogonalization needs finite values (a NaN or an infinity makes every output element NaN)");
    throw UsageError(where + ", beyond float32's range (3.4e38), which this backend computes in; scale the input down (the result does not "
                             "depend on the scale) or use the ref backend with f64 precision");
  }
}

}  // namespace

void require_finite_input(const double* values, int64_t batch, int64_t rows, int64_t cols, bool float_range, const std::string& what) {
  check(values, batch, rows, cols, float_range, what);
}

void require_finite_input(const float* values, int64_t batch, int64_t rows, int64_t cols, const std::string& what) {
  check(values, batch, rows, cols, false, what);
}

}  // namespace orthojit::runtime
