// Host emulation of kernels/cuda/orthojit_device.cuh for tests/cuda_fused_small_test.cpp: the
// generated fused kernel compiles as plain C++ and runs one CTA at a time on the CPU, one
// std::thread per CUDA thread, __syncthreads() a std::barrier, the m16n8k16 MMA a warp collective
// (every lane posts its fragments, then computes its own four outputs from the whole warp's).
// What runs is the generated phase code and the real cta_product / FragmentSource: the test copies
// the device header's part after its "fully fused" marker next to this file as fused_part.cuh.
// Only the PTX-backed vocabulary (conversions, mma, upper_tile, block_sum) is replaced here, with
// the same rounding (to nearest even). Not part of the build: the test compiles it with `c++`.
#pragma once

#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__
#define __restrict__

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 threadIdx;
inline Dim3 blockIdx;  // one CTA at a time
inline std::barrier<>* cta_barrier;
inline void __syncthreads() { cta_barrier->arrive_and_wait(); }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
using std::sqrt;
// The kernel's `extern __shared__ unsigned char shared_memory[]` binds to this (one CTA at a time).
alignas(16) unsigned char shared_memory[256 * 1024];

namespace oj {

typedef unsigned short u16;
typedef unsigned int u32;

inline float bf16_to_f32(u16 bits) { return __uint_as_float(static_cast<u32>(bits) << 16); }
inline u16 f32_to_bf16(float value) {
  if (std::isnan(value)) return 0x7fc0;
  u32 bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<u16>(bits >> 16);
}
inline float f16_to_f32(u16 bits) {
  _Float16 half;
  std::memcpy(&half, &bits, 2);
  return static_cast<float>(half);
}
inline u16 f32_to_f16(float value) {
  const _Float16 half = static_cast<_Float16>(value);  // round to nearest even
  u16 bits;
  std::memcpy(&bits, &half, 2);
  return bits;
}

struct Bf16 {
  typedef u16 storage;
  static float load(u16 bits) { return bf16_to_f32(bits); }
  static u16 store(float value) { return f32_to_bf16(value); }
};
struct F16 {
  typedef u16 storage;
  static float load(u16 bits) { return f16_to_f32(bits); }
  static u16 store(float value) { return f32_to_f16(value); }
};
struct F32 {
  typedef float storage;
  static float load(float value) { return value; }
  static float store(float value) { return value; }
};

// One warp's MMA exchange: the lanes' fragments, and a barrier that makes it a collective.
struct WarpState {
  std::barrier<> barrier{32};
  u32 a[32][4], b[32][2];
};
inline std::unique_ptr<WarpState[]> warps;  // one per warp of the running CTA

// D(16x8) += A(16x16)·B(16x8) with the fragment layout documented at oj::mma_bf16.
inline void mma_16x8x16(bool bf16, float* c, const u32* a, const u32* b) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  WarpState& state = warps[warp];
  for (int q = 0; q < 4; ++q) state.a[lane][q] = a[q];
  for (int q = 0; q < 2; ++q) state.b[lane][q] = b[q];
  state.barrier.arrive_and_wait();
  auto value = [&](u32 pair, int k) {
    const u16 bits = static_cast<u16>(k % 2 ? pair >> 16 : pair & 0xffffu);
    return bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  };
  // A[r][k] is in lane (r % 8)·4 + (k % 8)/2, register (r >= 8) + 2·(k >= 8); B[k][n] in lane
  // n·4 + (k % 8)/2, register (k >= 8).
  auto a_at = [&](int r, int k) { return value(state.a[(r % 8) * 4 + (k % 8) / 2][(r < 8 ? 0 : 1) + (k < 8 ? 0 : 2)], k); };
  auto b_at = [&](int k, int n) { return value(state.b[n * 4 + (k % 8) / 2][k < 8 ? 0 : 1], k); };
  for (int q = 0; q < 4; ++q) {
    const int row = g + (q / 2) * 8, col = 2 * t + q % 2;
    float sum = c[q];
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    c[q] = sum;
  }
  state.barrier.arrive_and_wait();  // nobody posts the next fragments before all have read these
}
inline void mma_bf16(float* c, const u32* a, const u32* b) { mma_16x8x16(true, c, a, b); }
inline void mma_f16(float* c, const u32* a, const u32* b) { mma_16x8x16(false, c, a, b); }

inline void upper_tile(int index, int& ti, int& tj) {
  int column = static_cast<int>((std::sqrt(8.0f * static_cast<float>(index) + 1.0f) - 1.0f) * 0.5f);
  while (column * (column + 1) / 2 > index) --column;
  while ((column + 1) * (column + 2) / 2 <= index) ++column;
  tj = column;
  ti = index - column * (column + 1) / 2;
}

template <typename T, int THREADS>
T block_sum(T value, T* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int width = THREADS / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) scratch[threadIdx.x] += scratch[threadIdx.x + width];
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();
  return total;
}

}  // namespace oj

#include "fused_part.cuh"
