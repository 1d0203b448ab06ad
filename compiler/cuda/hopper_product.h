// The host side of the sm_90a product tile (kernels/cuda/orthojit_hopper_product.cuh): which
// products it can run, a stand-alone entry kernel per operand layout, output type and C, the TMA
// tensor maps it needs (computed here, encoded by the driver's cuTensorMapEncodeTiled), and the
// launch (384 threads, the dynamic shared memory of shared_plan, persistent: at most one CTA per SM
// looping over the 128 x 128 tiles of D). Nothing selects it until a GPU has checked it (tests/cuda_device_test,
// scripts/gpu-check): the tuner's reference check is what would admit it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "cuda/nvrtc_compiler.h"
#include "cuda/tensor_map_request.h"
#include "support/scalar_type.h"

namespace orthojit::cuda {

struct HopperProductSpec {
  bool b_mn_major = false;            // B stored K x N (row-major); false: stored as Bᵀ, N x K
  ScalarType d_type = ScalarType::BF16;  // bf16 or f32
  bool has_c = true;                  // β·C (C bf16 like A and B)
  bool wide = false;                  // the 128 x 256 tile (bf16 D only); false: 128 x 128
  uint32_t tile_n() const;            // 128 or 256
  std::string kernel_name() const;    // "orthojit_hopper_product_kmajor_bf16_c", "..._n256", ...
};

// The CUDA source of the entry kernel of `spec` (compiled with the embedded device headers).
std::string hopper_product_source(const HopperProductSpec& spec);

// Why the tile cannot run D(m x n) = A(m x k)·B: empty when it can. TMA needs 16-byte aligned rows
// (k a multiple of 8, and n for an MN-major B); the kernel is sm_90a code, which runs on compute
// capability 9.0 only, and not while ORTHOJIT_CUDA_SM90A turns it off (sm90a_switch.h).
std::string hopper_product_unsupported_reason(const HopperProductSpec& spec, int64_t m, int64_t n, int64_t k, int device_sm);
// Why HopperProduct::run cannot take these operands: empty when it can. C is given exactly when the
// kernel adds β·C; C's and D's rows hold at least n elements, 16-byte aligned (ldc a multiple of 8,
// ldd of 8 or 4 by D's type); every base address is 16-byte aligned (TMA's global addresses).
std::string hopper_operands_unsupported_reason(const HopperProductSpec& spec, int64_t n, int64_t ldc, int64_t ldd, uint64_t a, uint64_t b, uint64_t c,
                                               uint64_t d);

// `outer` rows of `inner` elements of `element_bytes` bytes, `row_stride` elements apart (inner when
// 0; TMA needs 16-byte aligned rows), one matrix, in boxes of one 128-byte row x box_outer rows.
TensorMapRequest tile_map(int64_t inner, int64_t outer, int64_t row_stride, uint32_t element_bytes, uint32_t box_outer);
// A's map (m rows of K) and B's (n rows of K for a K-major B, k rows of N for an MN-major one), C's
// (m rows of N, bf16) and D's (m rows of N of D's type); the row strides in elements, dense when 0.
TensorMapRequest hopper_a_map(int64_t m, int64_t k, int64_t row_stride = 0);
TensorMapRequest hopper_b_map(const HopperProductSpec& spec, int64_t n, int64_t k, int64_t row_stride = 0);
TensorMapRequest hopper_c_map(int64_t m, int64_t n, int64_t row_stride = 0);
TensorMapRequest hopper_d_map(const HopperProductSpec& spec, int64_t m, int64_t n, int64_t row_stride = 0);

// Encodes a request with the driver (throws CudaError).
CUtensorMap encode_tensor_map(const TensorMapRequest& request, CUdeviceptr base);

// The compiled kernel of one spec on the current device.
class HopperProduct {
 public:
  explicit HopperProduct(const HopperProductSpec& spec, const NamedSources& headers);
  ~HopperProduct();
  HopperProduct(const HopperProduct&) = delete;
  HopperProduct& operator=(const HopperProduct&) = delete;
  // D = α·A·B + β·C + γ·I (c only with spec.has_c); row-major, row strides ldc and ldd in elements
  // (multiples of 16 bytes: C and D move by TMA too).
  void run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr d, int64_t m, int64_t n, int64_t k, int64_t ldc, int64_t ldd, float alpha,
           float beta, float gamma, CUstream stream) const;
  const HopperProductSpec& spec() const { return spec_; }
  uint32_t shared_bytes() const;  // the dynamic shared memory of a launch

 private:
  HopperProductSpec spec_;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
};

}  // namespace orthojit::cuda
