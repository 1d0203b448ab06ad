// Fuzz target: the .npy reader (runtime::parse_npy, what read_npy runs on a file's bytes). Every
// input is an array of rank 2 or 3 with no empty dimension and one value per element, or an
// NpyError.
#include <string_view>

#include "fuzz_target.h"
#include "runtime/npy_file.h"

ORTHOJIT_FUZZ_TARGET(npy) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const orthojit::runtime::NpyArray array = orthojit::runtime::parse_npy(bytes, "fuzz.npy");
    fuzz_check(array.shape.size() == 2 || array.shape.size() == 3, "parse_npy returned a shape of rank " + std::to_string(array.shape.size()));
    size_t count = 1;
    for (int64_t dimension : array.shape) {
      fuzz_check(dimension >= 1, "parse_npy returned a dimension " + std::to_string(dimension));
      count *= static_cast<size_t>(dimension);
    }
    fuzz_check(array.values.size() == count, "parse_npy returned " + std::to_string(array.values.size()) + " values for " + std::to_string(count) + " elements");
    // The data cannot be larger than the file.
    fuzz_check(count * (array.is_f64 ? 8 : 4) <= size, "parse_npy returned more data than the file holds");
  } catch (const orthojit::runtime::NpyError&) {
  } catch (const std::exception& error) {
    fuzz_failure(std::string("parse_npy threw something other than NpyError: ") + error.what());
  }
  return 0;
}
