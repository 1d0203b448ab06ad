// The optimizer's generated element-wise kernels (elementwise_codegen.h) on the device: compiled
// once per variant through the program cache for this GPU, launched on the caller's stream with
// no synchronization. Pointers are CUdeviceptr values of the primary context (the one PyTorch's
// tensors live in); element counts are 64-bit.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/cuda_driver.h"
#include "cuda/elementwise_codegen.h"
#include "cuda/nvrtc_compiler.h"

namespace orthojit::cuda {

class ElementwiseKernels {
 public:
  // `headers`: the device vocabulary (kernels::cuda_device_headers()).
  explicit ElementwiseKernels(NamedSources headers) : headers_(std::move(headers)) {}
  ~ElementwiseKernels();

  void muon_momentum(const MuonMomentumKernel& kernel, CUdeviceptr g, CUdeviceptr m, CUdeviceptr u, double beta, int64_t count, CUstream stream);
  // row_step: 0 for one step value for every row.
  void muon_apply(const MuonApplyKernel& kernel, CUdeviceptr p, CUdeviceptr o, CUdeviceptr row_step, double step, double decay, int64_t rows,
                  int64_t cols, int64_t first, int64_t count, CUstream stream);
  void accumulate(ScalarType grad, CUdeviceptr g, CUdeviceptr acc, int64_t count, CUstream stream);
  void divide(CUdeviceptr x, float divisor, int64_t count, CUstream stream);
  void convert(ScalarType from, CUdeviceptr s, ScalarType to, CUdeviceptr d, int64_t count, CUstream stream);
  void adamw(const AdamWKernel& kernel, CUdeviceptr g, CUdeviceptr m, CUdeviceptr v, CUdeviceptr p, double beta1, double beta2, double lr,
             double bias1, double bias2, double eps, double scale, double decay, int64_t count, CUstream stream);

  // *flag (a device u32) ← 1 when one of g's `count` elements is a NaN or an infinity (never 0).
  void nonfinite(ScalarType grad, CUdeviceptr g, CUdeviceptr flag, int64_t count, CUstream stream);
  // Σ x[i]² in f64 over `count` f32 elements: one partial per thread, copied back and added in
  // order (deterministic for a device); waits for `stream`.
  double sum_squares(CUdeviceptr x, int64_t count, CUstream stream);

  // The process's (device headers from the embedded vocabulary).
  static ElementwiseKernels& process_default(const NamedSources& headers);

 private:
  CUfunction function(const std::string& source, const char* name);
  // Returns the number of threads launched (blocks × 256).
  int64_t launch(CUfunction function, int64_t count, void** arguments, CUstream stream);
  int64_t most_threads() const;

  NamedSources headers_;
  std::mutex mutex_;
  std::map<std::string, std::pair<CUmodule, CUfunction>> loaded_;  // by source
  CUdeviceptr partials_ = 0;  // sum_squares' partials (most_threads() doubles), allocated once
};

}  // namespace orthojit::cuda
