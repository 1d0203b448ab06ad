// The update rules of update_rules.h on device memory: the generated element-wise kernels
// (compiler/cuda/elementwise_codegen.h, the same arithmetic in the same order, so the same bits)
// launched on the caller's CUDA stream without synchronizing. Pointers are CUdeviceptr values of
// device 0's primary context (PyTorch's tensors). Without the CUDA backend in this build or a
// usable device: UsageError saying why.
#pragma once

#include <cstdint>

#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/parameter.h"

namespace orthojit::runtime {

// M (f32, in place) and U (f32) from g, as muon_momentum.
void device_muon_momentum(const MuonGroupSettings& muon, DType grad_type, std::uintptr_t grad, std::uintptr_t momentum, std::uintptr_t update,
                          int64_t count, void* stream);

// p ← p·(1 − lr·wd) − step_row·O for `count` elements of `batch x rows x cols` starting at
// element `first` (param and orthogonal point at that element); `row_step` is a device array of
// `rows` f64 values (lr·s per row), or 0 for `step` on every row.
void device_apply_muon(double lr, double weight_decay, DType param_type, std::uintptr_t param, std::uintptr_t orthogonal, std::uintptr_t row_step,
                       double step, int64_t rows, int64_t cols, int64_t first, int64_t count, void* stream);

// acc ← acc + g (acc f32), x ← x / divisor (f32), and d ← s converted (rounded once).
void device_accumulate(DType grad_type, std::uintptr_t grad, std::uintptr_t accumulator, int64_t count, void* stream);
void device_divide(std::uintptr_t values, float divisor, int64_t count, void* stream);
// Σ x[i]² in f64 over f32 values (ElementwiseKernels::sum_squares); waits for `stream`.
double device_sum_squares(std::uintptr_t values, int64_t count, void* stream);
void device_convert(DType from, std::uintptr_t source, DType to, std::uintptr_t destination, int64_t count, void* stream);

// One AdamW step (`step` already incremented), as adam_step.
void device_adam_step(const AdamGroupSettings& adam, int64_t step, DType grad_type, std::uintptr_t grad, std::uintptr_t exp_avg,
                      std::uintptr_t exp_avg_sq, DType param_type, std::uintptr_t param, int64_t count, void* stream);

}  // namespace orthojit::runtime
