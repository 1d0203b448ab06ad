// The sm_90a product tile's host side (hopper_product.h).
#include "cuda/program_cache.h"
#include "cuda/hopper_product.h"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cuda/cuda_driver.h"
#include "cuda/orthojit_hopper_layout.cuh"
#include "cuda/sm90a_switch.h"

namespace orthojit::cuda {

uint32_t HopperProductSpec::tile_n() const { return wide ? oj::hopper::kWideTileN : oj::hopper::kTileN; }

std::string HopperProductSpec::kernel_name() const {
  return std::string("orthojit_hopper_product_") + (b_mn_major ? "mnmajor" : "kmajor") + "_" + (d_type == ScalarType::F32 ? "f32" : "bf16") + (has_c ? "_c" : "") +
         (wide ? "_n256" : "");
}

std::string hopper_product_source(const HopperProductSpec& spec) {
  if (spec.d_type != ScalarType::BF16 && spec.d_type != ScalarType::F32) throw std::invalid_argument("hopper product: D must be bf16 or f32");
  if (spec.wide && spec.d_type != ScalarType::BF16)
    throw std::invalid_argument("hopper product: the 128 x 256 tile writes a bf16 D (an f32 epilogue tile would leave room for two stages only)");
  const bool f32 = spec.d_type == ScalarType::F32;
  const std::string map = "const __grid_constant__ oj::hopper::TensorMap ";
  return std::string("#include \"orthojit_hopper_product.cuh\"\n") + "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(oj::hopper::kThreads) +
         ", 1) " + spec.kernel_name() + "(" + map + "a_map, " + map + "b_map, " + (spec.has_c ? map + "c_map, " : "") + map +
         "d_map,\n    int k, int tiles_m, int tiles_n, int items, float alpha, float beta, float gamma) {\n"
         "  oj::hopper::product_tile<" +
         (spec.b_mn_major ? "true" : "false") + ", false, " + (spec.has_c ? "true" : "false") + ", " + (f32 ? "oj::F32" : "oj::Bf16") + ", " + std::to_string(spec.tile_n()) + ">(a_map, b_map, " +
         (spec.has_c ? "&c_map" : "nullptr") + ", d_map, k, alpha, beta, gamma, tiles_m, tiles_n, 8, items, 1);\n}\n";
}

std::string hopper_product_unsupported_reason(const HopperProductSpec& spec, int64_t m, int64_t n, int64_t k, int device_sm) {
  if (const std::string why = sm90a_disabled_reason(); !why.empty()) return "the sm_90a product tile is turned off by " + why;
  if (device_sm != 90) return "the sm_90a product tile runs on compute capability 9.0 only (this device: sm_" + std::to_string(device_sm) + ")";
  if (m < 1 || n < 1 || k < 1) return "empty product";
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return "a dimension beyond 2^31 - 1";
  if (k % 8 != 0) return "k = " + std::to_string(k) + " is not a multiple of 8 (TMA needs 16-byte aligned rows of A)";
  if (spec.b_mn_major && n % 8 != 0) return "n = " + std::to_string(n) + " is not a multiple of 8 (TMA needs 16-byte aligned rows of B)";
  return "";
}

TensorMapRequest tile_map(int64_t inner, int64_t outer, int64_t row_stride, uint32_t element_bytes, uint32_t box_outer) {
  TensorMapRequest request;
  request.element_bytes = element_bytes;
  request.dims[0] = static_cast<uint64_t>(inner);
  request.dims[1] = static_cast<uint64_t>(outer);
  request.row_bytes = static_cast<uint64_t>(row_stride > 0 ? row_stride : inner) * element_bytes;
  request.matrix_bytes = request.row_bytes * static_cast<uint64_t>(outer);  // one matrix
  request.box[0] = oj::hopper::kSwizzleBytes / element_bytes;
  request.box[1] = box_outer;
  return request;
}

TensorMapRequest hopper_a_map(int64_t m, int64_t k, int64_t row_stride) { return tile_map(k, m, row_stride, 2, oj::hopper::kTileM); }

TensorMapRequest hopper_b_map(const HopperProductSpec& spec, int64_t n, int64_t k, int64_t row_stride) {
  // MN-major: K rows of N in boxes of 64 columns x 64 rows, tile_n / 64 per stage; K-major: N rows
  // of K (Bᵀ) in one box of 64 k x tile_n rows (TMA boxes take up to 256 rows).
  return spec.b_mn_major ? tile_map(n, k, row_stride, 2, oj::hopper::kTileK) : tile_map(k, n, row_stride, 2, spec.tile_n());
}

// The epilogue's boxes: 128-byte rows (64 bf16 or 32 f32 columns) x 128 rows.
TensorMapRequest hopper_c_map(int64_t m, int64_t n, int64_t row_stride) { return tile_map(n, m, row_stride, 2, oj::hopper::kTileM); }
TensorMapRequest hopper_d_map(const HopperProductSpec& spec, int64_t m, int64_t n, int64_t row_stride) {
  return tile_map(n, m, row_stride, spec.d_type == ScalarType::F32 ? 4 : 2, oj::hopper::kTileM);
}

CUtensorMap encode_tensor_map(const TensorMapRequest& request, CUdeviceptr base) {
  CUtensorMap map;
  // 3-D: matrices of the batch along the third dimension (1 for a single product).
  const cuuint64_t dims[3] = {request.dims[0], request.dims[1], request.dims[2]};
  const cuuint64_t strides[2] = {request.row_bytes, std::max<uint64_t>(request.matrix_bytes, 16)};
  const cuuint32_t box[3] = {request.box[0], request.box[1], 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  // Zeros outside the tensor (OOB fill NONE; stores skip it), 128-byte swizzle: what the kernel's
  // descriptors and epilogue read.
  if (request.element_bytes != 2 && request.element_bytes != 4) throw std::invalid_argument("a tensor map of " + std::to_string(request.element_bytes) + "-byte elements (bf16 or f32 only)");
  check(Device::get().api().cuTensorMapEncodeTiled(&map, request.element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, reinterpret_cast<void*>(base), dims, strides, box,
                                                   element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  return map;
}

HopperProduct::HopperProduct(const HopperProductSpec& spec, const NamedSources& headers) : spec_(spec) {
  const Device& device = Device::get();
  device.make_current();
  // Through the process's program cache (memory and disk), like every generated program.
  const NvrtcOutput compiled = ProgramCache::process_default().get_or_compile(hopper_product_source(spec), headers, "sm_90a").output;
  std::vector<char> image = compiled.image;
  image.push_back('\0');
  check(device.api().cuModuleLoadData(&module_, image.data()), "cuModuleLoadData(" + spec.kernel_name() + ")");
  check(device.api().cuModuleGetFunction(&function_, module_, spec.kernel_name().c_str()), "cuModuleGetFunction(" + spec.kernel_name() + ")");
  check(device.api().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(shared_bytes())),
        "cuFuncSetAttribute(max dynamic shared memory)");
}

HopperProduct::~HopperProduct() {
  if (!module_) return;
  Device::get().make_current_quietly();
  Device::get().api().cuModuleUnload(module_);
}

uint32_t HopperProduct::shared_bytes() const { return oj::hopper::dynamic_shared_bytes(spec_.d_type == ScalarType::F32 ? 4 : 2, false, spec_.tile_n()); }

std::string hopper_operands_unsupported_reason(const HopperProductSpec& spec, int64_t n, int64_t ldc, int64_t ldd, uint64_t a, uint64_t b, uint64_t c,
                                               uint64_t d) {
  const int64_t d_bytes = spec.d_type == ScalarType::F32 ? 4 : 2;
  if ((c != 0) != spec.has_c) return spec.has_c ? "this kernel adds β·C and needs C" : "this kernel has no C";
  if (spec.has_c && ldc < n) return "ldc = " + std::to_string(ldc) + " is less than n = " + std::to_string(n) + " (C's rows would overlap)";
  if (spec.has_c && ldc * 2 % 16 != 0) return "ldc = " + std::to_string(ldc) + " is not a multiple of 8 (TMA needs 16-byte aligned rows of C)";
  if (ldd < n) return "ldd = " + std::to_string(ldd) + " is less than n = " + std::to_string(n) + " (D's rows would overlap)";
  if (ldd * d_bytes % 16 != 0) return "ldd = " + std::to_string(ldd) + " is not a multiple of " + std::to_string(16 / d_bytes) + " (TMA needs 16-byte aligned rows of D)";
  for (const auto& [name, address] : {std::pair<const char*, uint64_t>{"A", a}, {"B", b}, {"C", c}, {"D", d}})
    if (address % 16 != 0) return std::string(name) + " at " + std::to_string(address) + " is not 16-byte aligned (TMA's global addresses must be)";
  return "";
}

void HopperProduct::run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr d, int64_t m, int64_t n, int64_t k, int64_t ldc, int64_t ldd, float alpha,
                        float beta, float gamma, CUstream stream) const {
  std::string reason = hopper_product_unsupported_reason(spec_, m, n, k, Device::get().info().sm);
  if (reason.empty()) reason = hopper_operands_unsupported_reason(spec_, n, ldc, ldd, a, b, c, d);
  if (!reason.empty()) throw std::invalid_argument("hopper product " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ": " + reason);
  alignas(64) CUtensorMap a_map = encode_tensor_map(hopper_a_map(m, k), a);
  alignas(64) CUtensorMap b_map = encode_tensor_map(hopper_b_map(spec_, n, k), b);
  alignas(64) CUtensorMap c_map{};
  if (spec_.has_c) c_map = encode_tensor_map(hopper_c_map(m, n, ldc), c);
  alignas(64) CUtensorMap d_map = encode_tensor_map(hopper_d_map(spec_, m, n, ldd), d);
  const int64_t tiles_m = (m + oj::hopper::kTileM - 1) / oj::hopper::kTileM, tiles_n = (n + spec_.tile_n() - 1) / spec_.tile_n();
  int ki = static_cast<int>(k), tiles_mi = static_cast<int>(tiles_m), tiles_ni = static_cast<int>(tiles_n), items = static_cast<int>(tiles_m * tiles_n);
  std::vector<void*> parameters = {&a_map, &b_map};
  if (spec_.has_c) parameters.push_back(&c_map);
  for (void* parameter : std::initializer_list<void*>{&d_map, &ki, &tiles_mi, &tiles_ni, &items, &alpha, &beta, &gamma}) parameters.push_back(parameter);
  // Persistent: one CTA per SM at most, each looping over the tiles.
  const auto ctas = static_cast<unsigned>(std::min<int64_t>(items, std::max(1, Device::get().info().multiprocessors)));
  check(Device::get().api().cuLaunchKernel(function_, ctas, 1, 1, oj::hopper::kThreads, 1, 1, shared_bytes(), stream, parameters.data(), nullptr), spec_.kernel_name());
}

}  // namespace orthojit::cuda
