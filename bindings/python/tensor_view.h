// The memory of a NumPy array or PyTorch tensor (DLPack, no copy) as the runtime's update rules
// take it: CPU, row-major contiguous, f32 / bf16 / f16. Shared by the optimizer and the ZeRO
// bindings.
#pragma once

#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/muon/parameter.h"

namespace orthojit::python {

struct TensorView {
  void* data = nullptr;
  runtime::DType dtype = runtime::DType::F32;
  int64_t count = 1;
  std::vector<int64_t> shape;
};

// Throws std::invalid_argument (ValueError) for memory off the CPU or not contiguous, and
// nanobind::type_error (TypeError) for another dtype (f32_only: only float32), naming `what`.
TensorView tensor_view(const nanobind::ndarray<>& array, const std::string& what, bool f32_only = false);

}  // namespace orthojit::python
