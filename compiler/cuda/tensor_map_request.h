// A 3-D TMA tensor map (a batch of matrices) as cuTensorMapEncodeTiled takes it (CUDA driver API, "Tensor Map Object
// Management"), as plain data: what the generator asks for and the executable encodes once the
// buffers have addresses. bf16 or f32 elements, 128-byte swizzle, zeros outside the tensor (loads)
// and nothing written outside it (stores).
#pragma once

#include <cstdint>

namespace orthojit::cuda {

struct TensorMapRequest {
  uint64_t dims[3] = {0, 0, 1};  // inner (contiguous) first, then rows, then matrices
  uint64_t row_bytes = 0;        // the row stride in bytes (a multiple of 16)
  uint64_t matrix_bytes = 0;     // the matrix stride in bytes (a multiple of 16)
  uint32_t box[2] = {0, 0};      // the shared-memory tile one load or store moves (of one matrix), inner first
  uint32_t element_bytes = 2;    // 2: bf16, 4: f32
  bool operator==(const TensorMapRequest&) const = default;
};

}  // namespace orthojit::cuda
