// The sm_90a product tile's host side (hopper_product.h).
#include "cuda/hopper_product.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cuda/cuda_driver.h"
#include "cuda/orthojit_hopper_layout.cuh"

namespace orthojit::cuda {

std::string HopperProductSpec::kernel_name() const {
  return std::string("orthojit_hopper_product_") + (b_mn_major ? "mnmajor" : "kmajor") + "_" + (d_type == ScalarType::F32 ? "f32" : "bf16");
}

std::string hopper_product_source(const HopperProductSpec& spec) {
  if (spec.d_type != ScalarType::BF16 && spec.d_type != ScalarType::F32) throw std::invalid_argument("hopper product: D must be bf16 or f32");
  const bool f32 = spec.d_type == ScalarType::F32;
  return std::string("#include \"orthojit_hopper_product.cuh\"\n") + "extern \"C\" __global__ void __launch_bounds__(" +
         std::to_string(oj::hopper::kThreads) + ", 1) " + spec.kernel_name() +
         "(const __grid_constant__ oj::hopper::TensorMap a_map, const __grid_constant__ oj::hopper::TensorMap b_map,\n"
         "    const unsigned short* c, " +
         (f32 ? "float" : "unsigned short") +
         "* d, int m, int n, int k, int ldc, int ldd, float alpha, float beta, float gamma) {\n"
         "  oj::hopper::product_tile<" +
         (spec.b_mn_major ? "true" : "false") + ", false, " + (f32 ? "oj::F32" : "oj::Bf16") +
         ", oj::Bf16>(a_map, b_map, c, d, m, n, k, ldc, ldd, alpha, beta, gamma, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x), 0);\n}\n";
}

std::string hopper_product_unsupported_reason(const HopperProductSpec& spec, int64_t m, int64_t n, int64_t k, int device_sm) {
  if (device_sm != 90) return "the sm_90a product tile runs on compute capability 9.0 only (this device: sm_" + std::to_string(device_sm) + ")";
  if (m < 1 || n < 1 || k < 1) return "empty product";
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return "a dimension beyond 2^31 - 1";
  if (k % 8 != 0) return "k = " + std::to_string(k) + " is not a multiple of 8 (TMA needs 16-byte aligned rows of A)";
  if (spec.b_mn_major && n % 8 != 0) return "n = " + std::to_string(n) + " is not a multiple of 8 (TMA needs 16-byte aligned rows of B)";
  return "";
}

namespace {

// A row-major bf16 tensor of `outer` rows of `inner` elements `row_stride` apart (inner when 0),
// moved in boxes of box_inner x box_outer.
TensorMapRequest bf16_rows(int64_t inner, int64_t outer, int64_t row_stride, uint32_t box_inner, uint32_t box_outer) {
  TensorMapRequest request;
  request.dims[0] = static_cast<uint64_t>(inner);
  request.dims[1] = static_cast<uint64_t>(outer);
  request.row_bytes = static_cast<uint64_t>(row_stride > 0 ? row_stride : inner) * 2;
  request.matrix_bytes = request.row_bytes * static_cast<uint64_t>(outer);  // one matrix
  request.box[0] = box_inner;
  request.box[1] = box_outer;
  return request;
}

}  // namespace

TensorMapRequest hopper_a_map(int64_t m, int64_t k, int64_t row_stride) { return bf16_rows(k, m, row_stride, oj::hopper::kTileK, oj::hopper::kTileM); }

TensorMapRequest hopper_b_map(const HopperProductSpec& spec, int64_t n, int64_t k, int64_t row_stride) {
  // MN-major: K rows of N in boxes of 64 columns x 64 rows, two per stage; K-major: N rows of K
  // (Bᵀ) in one box of 64 k x 128 rows.
  return spec.b_mn_major ? bf16_rows(n, k, row_stride, 64, oj::hopper::kTileK) : bf16_rows(k, n, row_stride, oj::hopper::kTileK, oj::hopper::kTileN);
}

CUtensorMap encode_tensor_map(const TensorMapRequest& request, CUdeviceptr base) {
  CUtensorMap map;
  // 3-D: matrices of the batch along the third dimension (1 for a single product).
  const cuuint64_t dims[3] = {request.dims[0], request.dims[1], request.dims[2]};
  const cuuint64_t strides[2] = {request.row_bytes, std::max<uint64_t>(request.matrix_bytes, 16)};
  const cuuint32_t box[3] = {request.box[0], request.box[1], 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  // Zeros outside the tensor (OOB fill NONE), 128-byte swizzle: what the kernel's descriptors read.
  check(Device::get().api().cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, reinterpret_cast<void*>(base), dims, strides, box,
                                                   element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  return map;
}

HopperProduct::HopperProduct(const HopperProductSpec& spec, const NamedSources& headers) : spec_(spec) {
  const Device& device = Device::get();
  device.make_current();
  const NvrtcOutput compiled = compile_cuda(hopper_product_source(spec), headers, "sm_90a", spec.kernel_name() + ".cu");
  std::vector<char> image = compiled.image;
  image.push_back('\0');
  check(device.api().cuModuleLoadData(&module_, image.data()), "cuModuleLoadData(" + spec.kernel_name() + ")");
  check(device.api().cuModuleGetFunction(&function_, module_, spec.kernel_name().c_str()), "cuModuleGetFunction(" + spec.kernel_name() + ")");
  check(device.api().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(oj::hopper::kDynamicSharedBytes)),
        "cuFuncSetAttribute(max dynamic shared memory)");
}

HopperProduct::~HopperProduct() {
  if (module_) Device::get().api().cuModuleUnload(module_);
}

void HopperProduct::run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr d, int64_t m, int64_t n, int64_t k, int64_t ldc, int64_t ldd, float alpha,
                        float beta, float gamma, CUstream stream) const {
  const std::string reason = hopper_product_unsupported_reason(spec_, m, n, k, Device::get().info().sm);
  if (!reason.empty()) throw std::invalid_argument("hopper product " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ": " + reason);
  alignas(64) CUtensorMap a_map = encode_tensor_map(hopper_a_map(m, k), a);
  alignas(64) CUtensorMap b_map = encode_tensor_map(hopper_b_map(spec_, n, k), b);
  const CUdeviceptr c_pointer = c;
  int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k), ldci = static_cast<int>(ldc), lddi = static_cast<int>(ldd);
  void* parameters[] = {&a_map, &b_map, const_cast<CUdeviceptr*>(&c_pointer), &d, &mi, &ni, &ki, &ldci, &lddi, &alpha, &beta, &gamma};
  const auto tiles_n = static_cast<unsigned>((n + oj::hopper::kTileN - 1) / oj::hopper::kTileN);
  const auto tiles_m = static_cast<unsigned>((m + oj::hopper::kTileM - 1) / oj::hopper::kTileM);
  check(Device::get().api().cuLaunchKernel(function_, tiles_n, tiles_m, 1, oj::hopper::kThreads, 1, 1, oj::hopper::kDynamicSharedBytes, stream, parameters,
                                           nullptr),
        spec_.kernel_name());
}

}  // namespace orthojit::cuda
