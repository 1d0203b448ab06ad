// Reading and writing NumPy .npy files: f32 or f64, little-endian, C order, 2-D (one matrix) or
// 3-D (a batch of same-shape matrices). Anything else is refused with a message saying what was
// found and what is accepted.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace orthojit::runtime {

struct NpyArray {
  std::vector<int64_t> shape;  // {m, n} or {batch, m, n}
  bool is_f64 = false;         // element type in the file (f32 otherwise)
  std::vector<double> values;  // row-major, widened to double
};

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

NpyArray read_npy(const std::string& path);
// The same from a file's bytes in memory; `origin` names them in errors (read_npy passes the path).
NpyArray parse_npy(std::string_view bytes, const std::string& origin);
// Writes `array.values` as f32 (rounded to nearest) or f64 per `array.is_f64`, atomically
// (a temporary file renamed over the target, so a failure never leaves a half-written file).
void write_npy(const std::string& path, const NpyArray& array);

}  // namespace orthojit::runtime
