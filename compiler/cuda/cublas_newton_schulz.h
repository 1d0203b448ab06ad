// The GPU baseline and an autotuning candidate: Newton–Schulz written from the formula with
// cuBLAS products (libcublas opened with dlopen), the way DeepSpeed's and torch.optim.Muon's
// implementations run on a GPU: per step
//     A = X·Xᵀ;   B = b·A + c·A·A;   X = a·X + B·X
// as three GEMMs (cublasGemmStridedBatchedEx, 16-bit operands, f32 compute), with β carrying the
// b·A and a·X terms (two device copies per step); the Frobenius normalization and the f32
// output are two small NVRTC kernels. Tall inputs are worked on transposed, like the compiler's
// orient pass does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"
#include "dsl/ast.h"

namespace orthojit::cuda {

class CublasNewtonSchulz {
 public:
  // `storage` is BF16 or F16. The steps and the normalization are the program's;
  // `device_headers` the device vocabulary (kernels::cuda_device_headers()) its two small kernels
  // include.
  CublasNewtonSchulz(int64_t batch, int64_t rows, int64_t cols, ScalarType storage, std::vector<dsl::Triple> steps,
                     dsl::Normalization normalization, const NamedSources& device_headers);
  ~CublasNewtonSchulz();
  CublasNewtonSchulz(const CublasNewtonSchulz&) = delete;
  CublasNewtonSchulz& operator=(const CublasNewtonSchulz&) = delete;

  // batch x rows x cols f32 in and out (device memory); enqueued on `stream`, not synchronized.
  void run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const;
  // Host f32 in and out; synchronizes.
  void run(const float* input, float* output) const;

  // Empty when libcublas can be opened; else why not.
  static std::string unavailable_reason();
  // The bf16 GEMM rate of cuBLAS on this device (TFLOP/s), measured on n x n x n random data:
  // the yardstick the benchmarks report fractions of.
  static double measure_gemm_tflops(int64_t n, int repeats);
  // The operands that rate is measured on, as bf16 bits: uniform in [-1, 1), seed 7 (zeros would
  // flatter a rate: less switching power, higher clocks). Every rate compared with cuBLAS's uses them.
  static std::vector<uint16_t> rate_operand_bits(int64_t elements);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace orthojit::cuda
