// Normalization, output and diagonal kernels of the vendor-library baselines (see baseline_kernels.h).
#include "cuda/baseline_kernels.h"

#include <algorithm>
#include <mutex>

namespace orthojit::cuda {
namespace {

// Sum of squares per matrix with atomics: the order is not fixed, as in the frameworks.
constexpr const char* kSource = R"(#include "orthojit_device.cuh"
extern "C" __global__ void __launch_bounds__(256) baseline_sum_squares(const float* __restrict__ g, long long per_matrix, float* __restrict__ sums) {
  __shared__ float scratch[256];
  const long long z = blockIdx.z;
  float sum = 0.0f;
  for (long long e = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; e < per_matrix; e += static_cast<long long>(gridDim.x) * 256) {
    const float v = g[z * per_matrix + e];
    sum += v * v;
  }
  sum = oj::block_sum<float, 256>(sum, scratch);
  if (threadIdx.x == 0) atomicAdd(&sums[z], sum);
}
// x (row-major, m x n with m <= n) = cast(g / (safety·‖g‖ + eps)), transposing a tall g.
extern "C" __global__ void __launch_bounds__(256) baseline_scale_cast(const float* __restrict__ g, int rows, int cols, int transpose,
    const float* __restrict__ sums, float safety, float eps, int clamp, int f16, unsigned short* __restrict__ x) {
  const long long z = blockIdx.z, per_matrix = static_cast<long long>(rows) * cols;
  const float norm = sqrtf(sums[z]) * safety;
  const float denominator = clamp ? fmaxf(norm, eps) : norm + eps;
  for (long long e = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; e < per_matrix; e += static_cast<long long>(gridDim.x) * 256) {
    const long long i = e / cols, j = e % cols;
    const float v = g[z * per_matrix + e] / denominator;
    x[z * per_matrix + (transpose ? j * rows + i : e)] = f16 ? oj::f32_to_f16(v) : oj::f32_to_bf16(v);
  }
}
extern "C" __global__ void __launch_bounds__(256) baseline_output(const unsigned short* __restrict__ x, int rows, int cols, int transpose, int f16,
    float* __restrict__ out) {
  const long long z = blockIdx.z, per_matrix = static_cast<long long>(rows) * cols;
  for (long long e = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; e < per_matrix; e += static_cast<long long>(gridDim.x) * 256) {
    const long long i = e / cols, j = e % cols;
    const unsigned short bits = x[z * per_matrix + (transpose ? j * rows + i : e)];
    out[z * per_matrix + e] = f16 ? oj::f16_to_f32(bits) : oj::bf16_to_f32(bits);
  }
}
// d[z] += gamma·I (m x m): one thread per diagonal element.
extern "C" __global__ void __launch_bounds__(256) baseline_add_identity(unsigned short* __restrict__ d, int m, float gamma, int f16) {
  const int i = blockIdx.x * 256 + threadIdx.x;
  if (i >= m) return;
  unsigned short* element = d + static_cast<long long>(blockIdx.z) * m * m + static_cast<long long>(i) * m + i;
  const float v = (f16 ? oj::f16_to_f32(*element) : oj::bf16_to_f32(*element)) + gamma;
  *element = f16 ? oj::f32_to_f16(v) : oj::f32_to_bf16(v);
}
)";

unsigned elementwise_blocks(int64_t elements) { return static_cast<unsigned>(std::clamp<int64_t>((elements + 2047) / 2048, 1, 1024)); }

}  // namespace

const BaselineKernels& baseline_kernels(const NamedSources& headers) {
  static BaselineKernels kernels;
  static std::once_flag once;
  std::call_once(once, [&] {
    const Device& device = Device::get();
    device.make_current();
    const NvrtcOutput compiled = compile_cuda(kSource, headers, device.compile_target(), "baseline_kernels.cu");
    std::vector<char> image = compiled.image;
    image.push_back('\0');
    BaselineKernels loaded;
    check(device.api().cuModuleLoadData(&loaded.module, image.data()), "cuModuleLoadData(baseline kernels)");
    check(device.api().cuModuleGetFunction(&loaded.sum_squares, loaded.module, "baseline_sum_squares"), "cuModuleGetFunction");
    check(device.api().cuModuleGetFunction(&loaded.scale_cast, loaded.module, "baseline_scale_cast"), "cuModuleGetFunction");
    check(device.api().cuModuleGetFunction(&loaded.output, loaded.module, "baseline_output"), "cuModuleGetFunction");
    check(device.api().cuModuleGetFunction(&loaded.add_identity, loaded.module, "baseline_add_identity"), "cuModuleGetFunction");
    kernels = loaded;
  });
  return kernels;
}

void enqueue_baseline_normalize(const BaselineKernels& kernels, CUdeviceptr g, int64_t batch, int64_t rows, int64_t cols, bool f16,
                                const dsl::Normalization& normalization, CUdeviceptr sums, CUdeviceptr x, CUstream stream) {
  const DriverApi& api = Device::get().api();
  int rows32 = static_cast<int>(rows), cols32 = static_cast<int>(cols), transpose = rows > cols ? 1 : 0, half = f16 ? 1 : 0;
  long long per_matrix = rows * cols;
  float safety = static_cast<float>(normalization.safety), eps = static_cast<float>(normalization.eps);
  int clamp = normalization.mode == dsl::Normalization::Mode::Clamp ? 1 : 0;
  const unsigned blocks = elementwise_blocks(per_matrix), matrices = static_cast<unsigned>(batch);
  check(api.cuMemsetD32Async(sums, 0, static_cast<size_t>(batch), stream), "cuMemsetD32Async");
  void* sum_parameters[] = {&g, &per_matrix, &sums};
  check(api.cuLaunchKernel(kernels.sum_squares, blocks, 1, matrices, 256, 1, 1, 0, stream, sum_parameters, nullptr), "baseline_sum_squares");
  void* scale_parameters[] = {&g, &rows32, &cols32, &transpose, &sums, &safety, &eps, &clamp, &half, &x};
  check(api.cuLaunchKernel(kernels.scale_cast, blocks, 1, matrices, 256, 1, 1, 0, stream, scale_parameters, nullptr), "baseline_scale_cast");
}

void enqueue_baseline_output(const BaselineKernels& kernels, CUdeviceptr x, int64_t batch, int64_t rows, int64_t cols, bool f16, CUdeviceptr out,
                             CUstream stream) {
  int rows32 = static_cast<int>(rows), cols32 = static_cast<int>(cols), transpose = rows > cols ? 1 : 0, half = f16 ? 1 : 0;
  void* parameters[] = {&x, &rows32, &cols32, &transpose, &half, &out};
  check(Device::get().api().cuLaunchKernel(kernels.output, elementwise_blocks(rows * cols), 1, static_cast<unsigned>(batch), 256, 1, 1, 0, stream,
                                           parameters, nullptr),
        "baseline_output");
}

void enqueue_baseline_add_identity(const BaselineKernels& kernels, CUdeviceptr d, int64_t batch, int64_t m, double gamma, bool f16, CUstream stream) {
  int m32 = static_cast<int>(m), half = f16 ? 1 : 0;
  float g = static_cast<float>(gamma);
  void* parameters[] = {&d, &m32, &g, &half};
  check(Device::get().api().cuLaunchKernel(kernels.add_identity, static_cast<unsigned>((m + 255) / 256), 1, static_cast<unsigned>(batch), 256, 1, 1, 0,
                                           stream, parameters, nullptr),
        "baseline_add_identity");
}

}  // namespace orthojit::cuda
