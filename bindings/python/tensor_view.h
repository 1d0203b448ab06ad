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
  bool cuda = false;  // CUDA memory of device 0 (data is a CUdeviceptr value)
};

// Throws std::invalid_argument (ValueError) for memory off the CPU or not contiguous, and
// nanobind::type_error (TypeError) for another dtype (f32_only: only float32), naming `what`.
TensorView tensor_view(const nanobind::ndarray<>& array, const std::string& what, bool f32_only = false);
// The same for CPU memory or CUDA memory of device 0 (the distributed optimizer on CUDA
// tensors); another device or device index is a std::invalid_argument naming `what`.
TensorView host_or_cuda_view(const nanobind::ndarray<>& array, const std::string& what);

}  // namespace orthojit::python
