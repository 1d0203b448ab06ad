// The vendor baseline and the CUDA tuner's vendor candidate: Newton–Schulz (standard or Gram) as
// cuBLASLt matmuls (libcublasLt opened with dlopen, like libcuda), the sequence of
// cublasLtMatmul calls of cublaslt_schedule.h:
//   * C ≠ D with β in the call: B = b·A + c·A·A is one matmul with C = A, β = b, and
//     X' = a·X + B·X one with C = X, β = a into the other X buffer (no device copies);
//   * 16-bit storage (bf16 or f16), f32 compute and scale (CUBLAS_COMPUTE_32F, CUDA_R_32F);
//   * the batch as strided batched layouts (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and
//     CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
//   * per product the best of cublasLtMatmulAlgoGetHeuristic's results (up to 8, within a 32 MiB
//     workspace): each timed on the product at construction, the fastest kept, ties within 3% to
//     the heuristic's order (ORTHOJIT_CUBLASLT_ALGO=heuristic: its first, untimed); chosen once per
//     distinct shape and layout and cached for the process;
//   * the epilogue cuBLASLt has for this (α·op(A)·op(B) + β·C, CUBLASLT_EPILOGUE_DEFAULT); the γ·I
//     of Gram's first Horner product has no cuBLASLt epilogue and is a diagonal kernel.
// The normalization and the f32 output are the shared baseline kernels (baseline_kernels.h); a
// tall input is worked on transposed, like the compiler's orient pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cublaslt_schedule.h"
#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"
#include "dsl/ast.h"

namespace orthojit::cuda {

class CublasLtNewtonSchulz {
 public:
  // `schedule` from standard_lt_schedule or gram_lt_schedule for (rows, cols); `storage` BF16 or
  // F16. Throws std::runtime_error with unavailable_reason() when cuBLASLt or the device is
  // missing, std::invalid_argument for a bad storage or shape, std::runtime_error naming the
  // product when the heuristic offers no algorithm.
  CublasLtNewtonSchulz(int64_t batch, int64_t rows, int64_t cols, ScalarType storage, LtSchedule schedule, dsl::Normalization normalization,
                       const NamedSources& device_headers);
  ~CublasLtNewtonSchulz();
  CublasLtNewtonSchulz(const CublasLtNewtonSchulz&) = delete;
  CublasLtNewtonSchulz& operator=(const CublasLtNewtonSchulz&) = delete;

  // batch x rows x cols f32 in and out (device memory); enqueued on `stream`, not synchronized.
  void run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const;
  // Host f32 in and out; synchronizes.
  void run(const float* input, float* output) const;

  const LtSchedule& schedule() const;
  // The algorithm chosen per product ("step 0: A = X·Xᵀ: algo 21 tile 13 stages 8 ws 0 B").
  std::string algorithms() const;

  // Empty when libcublasLt can be opened and a CUDA device is usable; else what is missing (the
  // library names and paths tried and why each failed, or the driver's reason).
  static std::string unavailable_reason();
  // The library part alone (empty when libcublasLt is loaded).
  static std::string library_reason();
  // The names and paths tried, in order: $ORTHOJIT_CUBLASLT_LIBRARY when set, the sonames
  // libcublasLt.so.13, .so.12, .so (the loader's search path, where scripts/gpu-check puts the
  // pip wheels' nvidia/cu13/lib or nvidia/cublas/lib), then the toolkit's library folder this
  // build was configured with.
  static std::vector<std::string> library_candidates();
  // Tries to dlopen each candidate (closing what it opens): "" when one opens, else the reason
  // unavailable_reason() would give for that list. For tests of the reason.
  static std::string probe_library(const std::vector<std::string>& candidates);
  // cublasLtGetVersion() of the loaded library (0 when not loaded).
  static size_t library_version();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace orthojit::cuda
