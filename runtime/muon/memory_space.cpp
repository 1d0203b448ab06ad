// Host and CUDA memory spaces (see memory_space.h).
#include "runtime/muon/memory_space.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "runtime/muon/device_update_rules.h"
#include "runtime/muon/update_rules.h"
#include "runtime/orthogonalize.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "cuda/cuda_driver.h"
#include "cuda/elementwise_kernels.h"
#include "kernels/cuda_device_headers.h"
#endif

namespace orthojit::runtime {
namespace {

class HostMemory final : public MemorySpace {
 public:
  const char* name() const override { return "host"; }
  bool is_device() const override { return false; }
  std::string address_problem(std::uintptr_t) const override { return ""; }
  std::uintptr_t allocate(int64_t bytes) override {
    void* memory = std::calloc(static_cast<size_t>(bytes > 0 ? bytes : 1), 1);
    if (!memory) throw std::bad_alloc();
    return reinterpret_cast<std::uintptr_t>(memory);
  }
  void free(std::uintptr_t address) override { std::free(reinterpret_cast<void*>(address)); }
  void zero(std::uintptr_t address, int64_t bytes, void*) override {
    if (bytes > 0) std::memset(reinterpret_cast<void*>(address), 0, static_cast<size_t>(bytes));
  }
  void download(void* host, std::uintptr_t address, int64_t bytes) override {
    if (bytes > 0) std::memcpy(host, reinterpret_cast<const void*>(address), static_cast<size_t>(bytes));
  }
  void upload(std::uintptr_t address, const void* host, int64_t bytes) override {
    if (bytes > 0) std::memcpy(reinterpret_cast<void*>(address), host, static_cast<size_t>(bytes));
  }
  bool any_nonfinite(const std::vector<TensorSpan>& spans, void*) override {
    for (const TensorSpan& span : spans)
      if (first_nonfinite(span.type, reinterpret_cast<const void*>(span.address), span.count) >= 0) return true;
    return false;
  }
  double sum_squares(std::uintptr_t values, int64_t count, void*) override {
    const float* x = reinterpret_cast<const float*>(values);
    double sum = 0.0;
    for (int64_t i = 0; i < count; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return sum;
  }
  void adam_step(const AdamGroupSettings& adam, int64_t step, DType grad_type, std::uintptr_t grad, std::uintptr_t exp_avg, std::uintptr_t exp_avg_sq,
                 DType param_type, std::uintptr_t param, int64_t count, void*) override {
    // The gradient in its own type (adam_step widens each element as it reads it).
    runtime::adam_step(adam, step, grad_type, reinterpret_cast<const void*>(grad), reinterpret_cast<float*>(exp_avg), reinterpret_cast<float*>(exp_avg_sq),
                       param_type, reinterpret_cast<void*>(param), 0, count);
  }
  void copy(std::uintptr_t destination, std::uintptr_t source, int64_t bytes, void*) override {
    if (bytes > 0 && destination != source) std::memmove(reinterpret_cast<void*>(destination), reinterpret_cast<const void*>(source), static_cast<size_t>(bytes));
  }
  void accumulate(DType grad_type, std::uintptr_t grad, std::uintptr_t accumulator, int64_t count, void*) override {
    float* acc = reinterpret_cast<float*>(accumulator);
    const void* values = reinterpret_cast<const void*>(grad);
    ir::with_stored_type(scalar_type(grad_type), [&](auto stored) {  // the type once, then inline loads (as load_element)
      for (int64_t i = 0; i < count; ++i) acc[i] += static_cast<float>(ir::load_stored_as<decltype(stored)::value>(values, i));
    });
  }
  void divide(std::uintptr_t values, float divisor, int64_t count, void*) override {
    float* x = reinterpret_cast<float*>(values);
    for (int64_t i = 0; i < count; ++i) x[i] /= divisor;
  }
  void convert(DType from, std::uintptr_t source, DType to, std::uintptr_t destination, int64_t count, void*) override {
    const void* in = reinterpret_cast<const void*>(source);
    void* out = reinterpret_cast<void*>(destination);
    ir::with_stored_type(scalar_type(from), [&](auto source_type) {  // both types once, then inline (as store_element(load_element))
      ir::with_stored_type(scalar_type(to), [&](auto target_type) {
        for (int64_t i = 0; i < count; ++i)
          ir::store_rounded_as<decltype(target_type)::value>(out, i, ir::load_stored_as<decltype(source_type)::value>(in, i));
      });
    });
  }
  void muon_momentum(const MuonGroupSettings& muon, std::uintptr_t gradient, std::uintptr_t momentum, std::uintptr_t update, int64_t count,
                     void*) override {
    runtime::muon_momentum(muon, reinterpret_cast<const float*>(gradient), reinterpret_cast<float*>(momentum), reinterpret_cast<float*>(update), count);
  }
  void apply_muon(const MuonGroupSettings& muon, const MatrixPlan& plan, DType param_type, std::uintptr_t param, std::uintptr_t orthogonal,
                  int64_t begin, int64_t end, void*) override {
    runtime::apply_muon(muon, plan, param_type, reinterpret_cast<void*>(param), reinterpret_cast<const float*>(orthogonal), begin, end);
  }
};

#ifdef ORTHOJIT_HAVE_CUDA

class CudaMemory final : public MemorySpace {
 public:
  CudaMemory() : device_(cuda::Device::get()), api_(device_.api()) {
    device_.make_current();
    flag_ = allocate(sizeof(unsigned));
  }
  ~CudaMemory() override { free(flag_); }
  const char* name() const override { return "cuda"; }
  bool is_device() const override { return true; }
  std::string address_problem(std::uintptr_t address) const override {
    device_.make_current();
    unsigned type = 0;
    const CUresult result = api_.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, static_cast<CUdeviceptr>(address));
    const std::string device = "cuda:" + std::to_string(device_.info().ordinal);
    if (result == CUDA_ERROR_INVALID_VALUE)
      return "is not CUDA memory (the driver does not know the address: a host pointer?); memory = cuda takes device pointers of " + device +
             ", the device orthojit's kernels run on in this process";
    if (result != CUDA_SUCCESS) return "could not be checked: cuPointerGetAttribute failed with error " + std::to_string(static_cast<int>(result));
    // Memory of another device would be read through peer mappings at best, an illegal address
    // (a poisoned context) at worst.
    int ordinal = -1;
    if (api_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, static_cast<CUdeviceptr>(address)) == CUDA_SUCCESS &&
        ordinal >= 0 && ordinal != device_.info().ordinal)
      return "is memory of cuda:" + std::to_string(ordinal) + ", but orthojit's CUDA kernels run on " + device +
             " in this process (ORTHOJIT_CUDA_DEVICE, or the device current on the thread of the first call)";
    return "";
  }

  std::uintptr_t allocate(int64_t bytes) override {
    device_.make_current();
    CUdeviceptr pointer = 0;
    const size_t size = static_cast<size_t>(bytes > 0 ? bytes : 1);
    const CUresult result = api_.cuMemAlloc(&pointer, size);
    if (result == CUDA_ERROR_OUT_OF_MEMORY) throw std::bad_alloc();
    cuda::check(result, "cuMemAlloc(" + std::to_string(size) + " bytes)");
    // Zeroed on the legacy default stream and waited for: allocation happens at build time.
    cuda::check(api_.cuMemsetD8Async(pointer, 0, size, nullptr), "cuMemsetD8Async");
    cuda::check(api_.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
    return static_cast<std::uintptr_t>(pointer);
  }
  void free(std::uintptr_t address) override {
    if (!address) return;
    device_.make_current();
    api_.cuMemFree(static_cast<CUdeviceptr>(address));
  }
  void zero(std::uintptr_t address, int64_t bytes, void* stream) override {
    if (bytes <= 0) return;
    device_.make_current();
    cuda::check(api_.cuMemsetD8Async(static_cast<CUdeviceptr>(address), 0, static_cast<size_t>(bytes), static_cast<CUstream>(stream)), "cuMemsetD8Async");
  }
  void download(void* host, std::uintptr_t address, int64_t bytes) override {
    if (bytes <= 0) return;
    device_.make_current();
    cuda::check(api_.cuCtxSynchronize(), "cuCtxSynchronize");
    cuda::check(api_.cuMemcpyDtoH(host, static_cast<CUdeviceptr>(address), static_cast<size_t>(bytes)), "cuMemcpyDtoH");
  }
  void upload(std::uintptr_t address, const void* host, int64_t bytes) override {
    if (bytes <= 0) return;
    device_.make_current();
    cuda::check(api_.cuCtxSynchronize(), "cuCtxSynchronize");
    cuda::check(api_.cuMemcpyHtoD(static_cast<CUdeviceptr>(address), host, static_cast<size_t>(bytes)), "cuMemcpyHtoD");
  }
  bool any_nonfinite(const std::vector<TensorSpan>& spans, void* stream) override {
    if (spans.empty()) return false;
    device_.make_current();
    const auto s = static_cast<CUstream>(stream);
    cuda::check(api_.cuMemsetD32Async(static_cast<CUdeviceptr>(flag_), 0, 1, s), "cuMemsetD32Async");
    cuda::ElementwiseKernels& kernels = cuda::ElementwiseKernels::process_default(kernels::cuda_device_headers());
    for (const TensorSpan& span : spans) kernels.nonfinite(scalar_type(span.type), span.address, flag_, span.count, s);
    unsigned flag = 0;
    cuda::check(api_.cuMemcpyDtoHAsync(&flag, static_cast<CUdeviceptr>(flag_), sizeof flag, s), "cuMemcpyDtoHAsync");
    cuda::check(api_.cuStreamSynchronize(s), "cuStreamSynchronize");  // the step's one wait
    return flag != 0;
  }
  void adam_step(const AdamGroupSettings& adam, int64_t step, DType grad_type, std::uintptr_t grad, std::uintptr_t exp_avg, std::uintptr_t exp_avg_sq,
                 DType param_type, std::uintptr_t param, int64_t count, void* stream) override {
    device_adam_step(adam, step, grad_type, grad, exp_avg, exp_avg_sq, param_type, param, count, stream);
  }
  void copy(std::uintptr_t destination, std::uintptr_t source, int64_t bytes, void* stream) override {
    if (bytes <= 0 || destination == source) return;
    device_.make_current();
    cuda::check(api_.cuMemcpyDtoDAsync(static_cast<CUdeviceptr>(destination), static_cast<CUdeviceptr>(source), static_cast<size_t>(bytes),
                                       static_cast<CUstream>(stream)),
                "cuMemcpyDtoDAsync");
  }
  void accumulate(DType grad_type, std::uintptr_t grad, std::uintptr_t accumulator, int64_t count, void* stream) override {
    device_accumulate(grad_type, grad, accumulator, count, stream);
  }
  void divide(std::uintptr_t values, float divisor, int64_t count, void* stream) override { device_divide(values, divisor, count, stream); }
  double sum_squares(std::uintptr_t values, int64_t count, void* stream) override { return device_sum_squares(values, count, stream); }
  void convert(DType from, std::uintptr_t source, DType to, std::uintptr_t destination, int64_t count, void* stream) override {
    device_convert(from, source, to, destination, count, stream);
  }
  void muon_momentum(const MuonGroupSettings& muon, std::uintptr_t gradient, std::uintptr_t momentum, std::uintptr_t update, int64_t count,
                     void* stream) override {
    device_muon_momentum(muon, DType::F32, gradient, momentum, update, count, stream);
  }
  void apply_muon(const MuonGroupSettings& muon, const MatrixPlan& plan, DType param_type, std::uintptr_t param, std::uintptr_t orthogonal,
                  int64_t begin, int64_t end, void* stream) override {
    // One launch per piece of [begin, end) inside one block of one matrix: each piece has one
    // step lr·s, computed as apply_muon computes it, so no per-row array travels to the device.
    const int64_t matrix_elements = plan.rows * plan.cols, size = dtype_bytes(param_type);
    for (int64_t matrix = begin / matrix_elements; matrix * matrix_elements < end; ++matrix)
      for (const MatrixBlock& block : plan.blocks) {
        const int64_t lo = std::max(begin, matrix * matrix_elements + block.row_offset * plan.cols);
        const int64_t hi = std::min(end, matrix * matrix_elements + (block.row_offset + block.rows) * plan.cols);
        if (lo >= hi) continue;
        const auto [scale_rows, scale_cols] = scale_shape(plan, block);
        device_apply_muon(muon.lr, muon.weight_decay, param_type, param + static_cast<std::uintptr_t>(lo * size),
                          orthogonal + static_cast<std::uintptr_t>(lo * 4), 0, muon.lr * lr_scale(muon.lr_adjust, scale_rows, scale_cols), plan.rows,
                          plan.cols, lo, hi - lo, stream);
      }
  }

 private:
  const cuda::Device& device_;
  const cuda::DriverApi& api_;
  std::uintptr_t flag_ = 0;  // the non-finite check's u32
};

#endif

}  // namespace

std::shared_ptr<MemorySpace> host_memory() {
  static const std::shared_ptr<MemorySpace> memory = std::make_shared<HostMemory>();
  return memory;
}

std::shared_ptr<MemorySpace> cuda_memory() {
  if (const std::string why = cuda_backend_unavailable_reason(); !why.empty())
    throw UsageError("memory = cuda needs the cuda backend: " + why);
#ifdef ORTHOJIT_HAVE_CUDA
  return std::make_shared<CudaMemory>();  // one per optimizer: its own flag
#else
  throw UsageError("memory = cuda needs the cuda backend: this build has no CUDA backend");
#endif
}

}  // namespace orthojit::runtime
