// Device update rules (see device_update_rules.h).
#include "runtime/muon/device_update_rules.h"

#include <cmath>
#include <string>

#include "runtime/orthogonalize.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "cuda/elementwise_kernels.h"
#include "kernels/cuda_device_headers.h"
#endif

namespace orthojit::runtime {
namespace {

#ifdef ORTHOJIT_HAVE_CUDA

cuda::ElementwiseKernels& kernels_or_throw() {
  if (const std::string why = cuda_backend_unavailable_reason(); !why.empty()) throw UnavailableError("the device update rules need the cuda backend: " + why);
  return cuda::ElementwiseKernels::process_default(kernels::cuda_device_headers());
}
#else
[[noreturn]] void no_cuda() { throw UnavailableError("the device update rules need the cuda backend: " + cuda_backend_unavailable_reason()); }
#endif

}  // namespace

void device_muon_momentum(const MuonGroupSettings& muon, DType grad_type, std::uintptr_t grad, std::uintptr_t momentum, std::uintptr_t update,
                          int64_t count, void* stream) {
#ifdef ORTHOJIT_HAVE_CUDA
  cuda::MuonMomentumKernel kernel{scalar_type(grad_type), muon.momentum_kind == MomentumKind::Ema, muon.nesterov};
  kernels_or_throw().muon_momentum(kernel, grad, momentum, update, muon.momentum, count, static_cast<CUstream>(stream));
#else
  (void)muon, (void)grad_type, (void)grad, (void)momentum, (void)update, (void)count, (void)stream;
  no_cuda();
#endif
}

void device_apply_muon(double lr, double weight_decay, DType param_type, std::uintptr_t param, std::uintptr_t orthogonal, std::uintptr_t row_step,
                       double step, int64_t rows, int64_t cols, int64_t first, int64_t count, void* stream) {
#ifdef ORTHOJIT_HAVE_CUDA
  const double decay = 1.0 - lr * weight_decay;  // as apply_muon
  kernels_or_throw().muon_apply(cuda::MuonApplyKernel{scalar_type(param_type)}, param, orthogonal, row_step, step, decay, rows, cols, first, count,
                                static_cast<CUstream>(stream));
#else
  (void)lr, (void)weight_decay, (void)param_type, (void)param, (void)orthogonal, (void)row_step, (void)step, (void)rows, (void)cols, (void)first,
      (void)count, (void)stream;
  no_cuda();
#endif
}

void device_accumulate(DType grad_type, std::uintptr_t grad, std::uintptr_t accumulator, int64_t count, void* stream) {
#ifdef ORTHOJIT_HAVE_CUDA
  kernels_or_throw().accumulate(scalar_type(grad_type), grad, accumulator, count, static_cast<CUstream>(stream));
#else
  (void)grad_type, (void)grad, (void)accumulator, (void)count, (void)stream;
  no_cuda();
#endif
}

void device_divide(std::uintptr_t values, float divisor, int64_t count, void* stream) {
#ifdef ORTHOJIT_HAVE_CUDA
  kernels_or_throw().divide(values, divisor, count, static_cast<CUstream>(stream));
#else
  (void)values, (void)divisor, (void)count, (void)stream;
  no_cuda();
#endif
}

double device_sum_squares(std::uintptr_t values, int64_t count, void* stream) {
#ifdef ORTHOJIT_HAVE_CUDA
  return kernels_or_throw().sum_squares(values, count, static_cast<CUstream>(stream));
#else
  (void)values, (void)count, (void)stream;
  no_cuda();
  return 0.0;
#endif
}

void device_convert(DType from, std::uintptr_t source, DType to, std::uintptr_t destination, int64_t count, void* stream) {
#ifdef ORTHOJIT_HAVE_CUDA
  kernels_or_throw().convert(scalar_type(from), source, scalar_type(to), destination, count, static_cast<CUstream>(stream));
#else
  (void)from, (void)source, (void)to, (void)destination, (void)count, (void)stream;
  no_cuda();
#endif
}

void device_adam_step(const AdamGroupSettings& adam, int64_t step, DType grad_type, std::uintptr_t grad, std::uintptr_t exp_avg,
                      std::uintptr_t exp_avg_sq, DType param_type, std::uintptr_t param, int64_t count, void* stream) {
#ifdef ORTHOJIT_HAVE_CUDA
  // The scalars exactly as adam_step computes them on the host.
  const double t = static_cast<double>(step);
  const double bias1 = 1.0 - std::pow(adam.beta1, t), bias2 = 1.0 - std::pow(adam.beta2, t);
  const double decay = 1.0 - adam.lr * adam.weight_decay;
  const double scale = adam.lr * std::sqrt(bias2) / bias1;
  cuda::AdamWKernel kernel{scalar_type(grad_type), scalar_type(param_type), adam.formula == AdamFormula::Moonlight};
  kernels_or_throw().adamw(kernel, grad, exp_avg, exp_avg_sq, param, adam.beta1, adam.beta2, adam.lr, bias1, bias2, adam.eps, scale, decay, count,
                           static_cast<CUstream>(stream));
#else
  (void)adam, (void)step, (void)grad_type, (void)grad, (void)exp_avg, (void)exp_avg_sq, (void)param_type, (void)param, (void)count, (void)stream;
  no_cuda();
#endif
}

}  // namespace orthojit::runtime
