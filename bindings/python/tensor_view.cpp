// Tensor memory for the update rules (see tensor_view.h).
#include "bindings/python/tensor_view.h"

#include <stdexcept>

#include "runtime/orthogonalize.h"

namespace nb = nanobind;

namespace orthojit::python {
namespace {

using runtime::DType;

std::string dtype_name(nb::dlpack::dtype type) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(type.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: break;
  }
  return std::string(kind) + std::to_string(type.bits);
}

// dtype, shape and contiguity, wherever the memory is.
TensorView described(const nb::ndarray<>& array, const std::string& what, bool f32_only) {
  TensorView result;
  const nb::dlpack::dtype type = array.dtype();
  const auto code = static_cast<nb::dlpack::dtype_code>(type.code);
  if (type.lanes == 1 && code == nb::dlpack::dtype_code::Float && type.bits == 32) result.dtype = DType::F32;
  else if (!f32_only && type.lanes == 1 && code == nb::dlpack::dtype_code::Bfloat && type.bits == 16) result.dtype = DType::BF16;
  else if (!f32_only && type.lanes == 1 && code == nb::dlpack::dtype_code::Float && type.bits == 16) result.dtype = DType::F16;
  else
    throw nb::type_error((what + " has dtype " + dtype_name(type) + "; expected " + (f32_only ? "float32" : "float32, bfloat16 or float16")).c_str());
  int64_t expected_stride = 1;
  for (size_t d = array.ndim(); d-- > 0;) {
    const int64_t extent = static_cast<int64_t>(array.shape(d));
    if (extent != 1 && array.stride(d) != expected_stride) throw std::invalid_argument(what + " is not contiguous (row-major); pass a contiguous tensor");
    expected_stride *= extent;
  }
  for (size_t d = 0; d < array.ndim(); ++d) result.shape.push_back(static_cast<int64_t>(array.shape(d)));
  result.count = static_cast<int64_t>(array.size());
  result.data = array.data();
  return result;
}

}  // namespace

TensorView tensor_view(const nb::ndarray<>& array, const std::string& what, bool f32_only) {
  if (array.device_type() != nb::device::cpu::value)
    throw std::invalid_argument(what + " is not in CPU memory (DLPack device type " + std::to_string(array.device_type()) +
                                "); the Muon update rules run on the host (muon.backend = cuda moves only the orthogonalization to the GPU)");
  return described(array, what, f32_only);
}

TensorView host_or_cuda_view(const nb::ndarray<>& array, const std::string& what) {
  if (array.device_type() == nb::device::cpu::value) return described(array, what, false);
  if (array.device_type() != nb::device::cuda::value)
    throw std::invalid_argument(what + " is neither in CPU nor in CUDA memory (DLPack device type " + std::to_string(array.device_type()) + ")");
  if (const std::string why = runtime::cuda_device_mismatch_reason(array.device_id()); !why.empty()) throw std::invalid_argument(what + ": " + why);
  TensorView result = described(array, what, false);
  result.cuda = true;
  return result;
}

}  // namespace orthojit::python
