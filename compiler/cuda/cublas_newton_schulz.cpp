// Newton–Schulz from the formula with cuBLAS products (see cublas_newton_schulz.h).
#include "cuda/cublas_newton_schulz.h"


#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>

#include "cuda/baseline_kernels.h"
#include "cuda/nvrtc_compiler.h"
#include "support/bf16_bits.h"

namespace orthojit::cuda {
namespace {

#define ORTHOJIT_STRINGIFY_EXPANDED(x) ORTHOJIT_STRINGIFY(x)
#define ORTHOJIT_STRINGIFY(x) #x

// The cuBLAS entry points used, resolved by their versioned names (cublasCreate is
// cublasCreate_v2 in cublas_v2.h).
#define ORTHOJIT_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate)                    \
  X(cublasDestroy)                   \
  X(cublasSetStream)                 \
  X(cublasGemmStridedBatchedEx)      \
  X(cublasGetStatusString)

// cublas_api.h overloads the GEMM for 64-bit sizes in C++, so its type is spelled out (the
// 32-bit C entry point).
using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                                                cudaDataType, int, long long, const void*, cudaDataType, int, long long, const void*, void*,
                                                cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);

struct CublasApi {
  decltype(&::cublasCreate) cublasCreate = nullptr;
  decltype(&::cublasDestroy) cublasDestroy = nullptr;
  decltype(&::cublasSetStream) cublasSetStream = nullptr;
  GemmStridedBatchedEx cublasGemmStridedBatchedEx = nullptr;
  decltype(&::cublasGetStatusString) cublasGetStatusString = nullptr;
  std::string reason;  // empty when loaded
};

const CublasApi& cublas() {
  static const CublasApi api = [] {
    CublasApi loaded;
    void* handle = nullptr;
    std::string errors;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      if ((handle = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      const char* error = dlerror();
      errors += std::string(errors.empty() ? "" : "; ") + (error ? error : name);
    }
    if (!handle) {
      loaded.reason = "libcublas could not be loaded (" + errors + "); add the CUDA toolkit's lib64 to LD_LIBRARY_PATH";
      return loaded;
    }
#define ORTHOJIT_LOAD_SYMBOL(name)                                                                         \
  loaded.name = reinterpret_cast<decltype(loaded.name)>(dlsym(handle, ORTHOJIT_STRINGIFY_EXPANDED(name))); \
  if (!loaded.name) loaded.reason = std::string("libcublas lacks ") + ORTHOJIT_STRINGIFY_EXPANDED(name);
    ORTHOJIT_CUBLAS_FUNCTIONS(ORTHOJIT_LOAD_SYMBOL)
#undef ORTHOJIT_LOAD_SYMBOL
    return loaded;
  }();
  return api;
}

void check_cublas(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(what + ": " + cublas().cublasGetStatusString(status));
}

}  // namespace

struct CublasNewtonSchulz::State {
  int64_t batch = 1, rows = 0, cols = 0, m = 0, n = 0;
  bool transpose = false;
  ScalarType storage = ScalarType::BF16;
  std::vector<dsl::Triple> steps;
  dsl::Normalization normalization;
  cublasHandle_t handle = nullptr;
  NamedSources headers;
  DeviceBuffer x, x_next, a, b, sums, staging_input, staging_output;
};

std::string CublasNewtonSchulz::unavailable_reason() { return cublas().reason; }

CublasNewtonSchulz::CublasNewtonSchulz(int64_t batch, int64_t rows, int64_t cols, ScalarType storage, std::vector<dsl::Triple> steps,
                                       dsl::Normalization normalization, const NamedSources& device_headers)
    : state_(std::make_unique<State>()) {
  if (!cublas().reason.empty()) throw std::runtime_error(cublas().reason);
  if (storage != ScalarType::BF16 && storage != ScalarType::F16)
    throw std::invalid_argument("the cuBLAS Newton–Schulz baseline runs bf16 or f16 storage, not " + std::string(to_string(storage)));
  if (batch < 1 || rows < 1 || cols < 1) throw std::invalid_argument("the cuBLAS Newton–Schulz baseline needs a positive batch and shape");
  State& s = *state_;
  s.batch = batch;
  s.rows = rows;
  s.cols = cols;
  s.transpose = rows > cols;
  s.m = std::min(rows, cols);
  s.n = std::max(rows, cols);
  s.storage = storage;
  s.steps = std::move(steps);
  s.normalization = normalization;
  s.headers = device_headers;
  const Device& device = Device::get();
  device.make_current();
  check_cublas(cublas().cublasCreate(&s.handle), "cublasCreate");
  s.x = DeviceBuffer(batch * s.m * s.n * 2);
  s.x_next = DeviceBuffer(batch * s.m * s.n * 2);
  s.a = DeviceBuffer(batch * s.m * s.m * 2);
  s.b = DeviceBuffer(batch * s.m * s.m * 2);
  s.sums = DeviceBuffer(baseline_norm_scratch_bytes(batch));
  baseline_kernels(s.headers);
}

CublasNewtonSchulz::~CublasNewtonSchulz() {
  if (!state_) return;
  Device::get().make_current_quietly();  // its buffers are freed after this, in the caller's thread
  if (state_->handle) cublas().cublasDestroy(state_->handle);
}

void CublasNewtonSchulz::run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const {
  const State& s = *state_;
  const Device& device = Device::get();
  device.make_current();
  const DriverApi& api = device.api();
  const BaselineKernels& kernels = baseline_kernels(s.headers);
  const int f16 = s.storage == ScalarType::F16 ? 1 : 0;
  CUdeviceptr x = s.x.get(), x_next = s.x_next.get(), a = s.a.get(), b = s.b.get();
  enqueue_baseline_normalize(kernels, input, s.batch, s.rows, s.cols, f16 != 0, s.normalization, s.sums.get(), x, stream);
  const CublasApi& blas = cublas();
  check_cublas(blas.cublasSetStream(s.handle, reinterpret_cast<cudaStream_t>(stream)), "cublasSetStream");
  const cudaDataType type = f16 ? CUDA_R_16F : CUDA_R_16BF;
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n);
  const long long mm = s.m * s.m, mn = s.m * s.n;
  const float one = 1.0f, zero = 0.0f;
  const size_t mm_bytes = static_cast<size_t>(s.batch * mm * 2), mn_bytes = static_cast<size_t>(s.batch * mn * 2);
  // cuBLAS is column-major: a row-major m x n X is the column-major n x m matrix Xc = Xᵀ.
  for (const dsl::Triple& step : s.steps) {
    const float alpha_c = static_cast<float>(step.c), beta_b = static_cast<float>(step.b), beta_a = static_cast<float>(step.a);
    // A = X·Xᵀ = Xcᵀ·Xc (m x m)
    check_cublas(blas.cublasGemmStridedBatchedEx(s.handle, CUBLAS_OP_T, CUBLAS_OP_N, m, m, n, &one, reinterpret_cast<const void*>(x), type, n, mn,
                                                 reinterpret_cast<const void*>(x), type, n, mn, &zero, reinterpret_cast<void*>(a), type, m, mm,
                                                 static_cast<int>(s.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx (A = X·Xᵀ)");
    // B = b·A + c·A·A (β carries b·A: B starts as a copy of A)
    check(api.cuMemcpyDtoDAsync(b, a, mm_bytes, stream), "cuMemcpyDtoDAsync");
    check_cublas(blas.cublasGemmStridedBatchedEx(s.handle, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &alpha_c, reinterpret_cast<const void*>(a), type, m, mm,
                                                 reinterpret_cast<const void*>(a), type, m, mm, &beta_b, reinterpret_cast<void*>(b), type, m, mm,
                                                 static_cast<int>(s.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx (B = b·A + c·A·A)");
    // X' = a·X + B·X; column-major X'c = Xc·Bc (Bc = Bᵀ as stored), β carries a·X.
    check(api.cuMemcpyDtoDAsync(x_next, x, mn_bytes, stream), "cuMemcpyDtoDAsync");
    check_cublas(blas.cublasGemmStridedBatchedEx(s.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, m, &one, reinterpret_cast<const void*>(x), type, n, mn,
                                                 reinterpret_cast<const void*>(b), type, m, mm, &beta_a, reinterpret_cast<void*>(x_next), type, n, mn,
                                                 static_cast<int>(s.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx (X = a·X + B·X)");
    std::swap(x, x_next);
  }
  enqueue_baseline_output(kernels, x, s.batch, s.rows, s.cols, f16 != 0, output, stream);
}

void CublasNewtonSchulz::run(const float* input, float* output) const {
  State& s = *state_;
  const int64_t bytes = s.batch * s.rows * s.cols * 4;
  if (s.staging_input.bytes() != bytes) s.staging_input = DeviceBuffer(bytes);
  if (s.staging_output.bytes() != bytes) s.staging_output = DeviceBuffer(bytes);
  s.staging_input.upload(input, bytes);
  run_device(s.staging_input.get(), s.staging_output.get(), nullptr);
  check(Device::get().api().cuCtxSynchronize(), "cuBLAS Newton–Schulz");
  s.staging_output.download(output, bytes);
}

std::vector<uint16_t> CublasNewtonSchulz::rate_operand_bits(int64_t elements) {
  std::vector<uint16_t> bits(static_cast<size_t>(elements));
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (auto& value : bits) value = bf16_bits_of(uniform(random));
  return bits;
}

double CublasNewtonSchulz::measure_gemm_tflops(int64_t n, int repeats) {
  if (!cublas().reason.empty()) throw std::runtime_error(cublas().reason);
  const Device& device = Device::get();
  device.make_current();
  cublasHandle_t handle = nullptr;
  check_cublas(cublas().cublasCreate(&handle), "cublasCreate");
  DeviceBuffer a(n * n * 2), b(n * n * 2), c(n * n * 2);
  const std::vector<uint16_t> host = rate_operand_bits(n * n);
  a.upload(host.data(), n * n * 2);
  b.upload(host.data(), n * n * 2);
  const float one = 1.0f, zero = 0.0f;
  const int size = static_cast<int>(n);
  auto gemm = [&] {
    check_cublas(cublas().cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &one, reinterpret_cast<const void*>(a.get()),
                                                     CUDA_R_16BF, size, 0, reinterpret_cast<const void*>(b.get()), CUDA_R_16BF, size, 0, &zero,
                                                     reinterpret_cast<void*>(c.get()), CUDA_R_16BF, size, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx (rate)");
  };
  // Warm-up by time, not count: this is the first GPU work of the benchmark (a yardstick measured
  // on cold clocks would flatter every rate reported as a fraction of it).
  warm_up_for(500, gemm);
  EventTimer timer;
  std::vector<float> times;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    timer.start(nullptr);
    gemm();
    times.push_back(timer.stop(nullptr));
  }
  cublas().cublasDestroy(handle);
  std::sort(times.begin(), times.end());
  const double median_ms = times[times.size() / 2];
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (median_ms * 1e-3) / 1e12;
}

}  // namespace orthojit::cuda
