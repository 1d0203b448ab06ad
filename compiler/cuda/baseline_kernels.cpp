// Normalization, output and diagonal kernels of the vendor-library baselines (see baseline_kernels.h).
#include "cuda/program_cache.h"
#include "cuda/baseline_kernels.h"

#include <algorithm>
#include <mutex>

namespace orthojit::cuda {
namespace {

// The norm as the generated kernels take it (compiler/ir/norm_scale.h): the largest |g| first, a
// power-of-two scale from it, then the sum of the scaled squares, so that neither overflows nor
// underflows in f32 (unscaled, ‖g‖² of a 1024x4096 matrix is infinite from |g| near 1e16, and
// every square is 0 below 1e-23). Per matrix with atomics, so the order is not fixed (as in the
// frameworks): `stats` holds the largest magnitude's bits (non-negative floats order as their
// bits; NaN above +inf) and the sum, a pair per matrix.
constexpr const char* kSource = R"(#include "orthojit_device.cuh"
extern "C" __global__ void __launch_bounds__(256) baseline_largest(const float* __restrict__ g, long long per_matrix, unsigned* __restrict__ stats) {
  __shared__ unsigned scratch[256];
  const long long z = blockIdx.z;
  unsigned largest = 0;
  for (long long e = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; e < per_matrix; e += static_cast<long long>(gridDim.x) * 256) {
    const unsigned bits = __float_as_uint(g[z * per_matrix + e]) & 0x7fffffffu;
    largest = bits > largest ? bits : largest;
  }
  scratch[threadIdx.x] = largest;
  __syncthreads();
  for (int width = 128; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width && scratch[threadIdx.x + width] > scratch[threadIdx.x]) scratch[threadIdx.x] = scratch[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicMax(&stats[2 * z], scratch[0]);
}
__device__ __forceinline__ float baseline_scale(const unsigned* stats, long long z) { return oj::norm_scale(__uint_as_float(stats[2 * z])); }
extern "C" __global__ void __launch_bounds__(256) baseline_sum_squares(const float* __restrict__ g, long long per_matrix, unsigned* __restrict__ stats) {
  __shared__ float scratch[256];
  const long long z = blockIdx.z;
  const float scale = baseline_scale(stats, z);
  float sum = 0.0f;
  for (long long e = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; e < per_matrix; e += static_cast<long long>(gridDim.x) * 256) {
    const float v = g[z * per_matrix + e] * scale;
    sum = oj::f32_add(sum, oj::f32_mul(v, v));
  }
  sum = oj::block_sum<float, 256>(sum, scratch);
  if (threadIdx.x == 0) atomicAdd(reinterpret_cast<float*>(&stats[2 * z + 1]), sum);
}
// x (row-major, m x n with m <= n) = cast(g / (safety·‖g‖ + eps)), transposing a tall g; in the
// scaled units: s·g / (safety·‖s·g‖ + s·eps).
extern "C" __global__ void __launch_bounds__(256) baseline_scale_cast(const float* __restrict__ g, int rows, int cols, int transpose,
    const unsigned* __restrict__ stats, float safety, float eps, int clamp, int f16, unsigned short* __restrict__ x) {
  const long long z = blockIdx.z, per_matrix = static_cast<long long>(rows) * cols;
  const float scale = baseline_scale(stats, z);
  const float norm = oj::f32_mul(sqrtf(__uint_as_float(stats[2 * z + 1])), safety), scaled_eps = oj::f32_mul(eps, scale);
  const float denominator = clamp ? (norm > scaled_eps ? norm : scaled_eps) : oj::f32_add(norm, scaled_eps);
  for (long long e = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; e < per_matrix; e += static_cast<long long>(gridDim.x) * 256) {
    const long long i = e / cols, j = e % cols;
    const float v = g[z * per_matrix + e] * scale / denominator;
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

const char* baseline_kernel_source() { return kSource; }

const BaselineKernels& baseline_kernels(const NamedSources& headers) {
  static BaselineKernels kernels;
  static std::once_flag once;
  std::call_once(once, [&] {
    const Device& device = Device::get();
    device.make_current();
    const NvrtcOutput compiled = ProgramCache::process_default().get_or_compile(kSource, headers, device.compile_target()).output;
    std::vector<char> image = compiled.image;
    image.push_back('\0');
    BaselineKernels loaded;
    check(device.api().cuModuleLoadData(&loaded.module, image.data()), "cuModuleLoadData(baseline kernels)");
    check(device.api().cuModuleGetFunction(&loaded.largest, loaded.module, "baseline_largest"), "cuModuleGetFunction");
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
  check(api.cuMemsetD32Async(sums, 0, static_cast<size_t>(2 * batch), stream), "cuMemsetD32Async");
  void* largest_parameters[] = {&g, &per_matrix, &sums};
  check(api.cuLaunchKernel(kernels.largest, blocks, 1, matrices, 256, 1, 1, 0, stream, largest_parameters, nullptr), "baseline_largest");
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
