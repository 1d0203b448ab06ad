// orthojit's device vocabulary: everything generated CUDA code uses besides plain C++. It is
// embedded in the binary and handed to NVRTC as a named header, so compiling a kernel needs no
// CUDA toolkit headers on the user's machine (no cuda_bf16.h, no mma.h): storage conversions and
// the tensor-core instruction are written as inline PTX here, in one place.
//
// Conventions: 16-bit storage is carried as raw bits (unsigned short); arithmetic is f32.
#pragma once

namespace oj {

typedef unsigned short u16;
typedef unsigned int u32;

// ---- storage conversions (round to nearest even, as the reference interpreter) ----
__device__ __forceinline__ float bf16_to_f32(u16 bits) { return __uint_as_float(static_cast<u32>(bits) << 16); }
__device__ __forceinline__ u16 f32_to_bf16(float value) {
  u16 bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));  // sm_80+
  return bits;
}
__device__ __forceinline__ float f16_to_f32(u16 bits) {
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}
__device__ __forceinline__ u16 f32_to_f16(float value) {
  u16 bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bits;
}

// Storage types by tag: load as f32, store from f32.
struct Bf16 {
  typedef u16 storage;
  static __device__ __forceinline__ float load(u16 bits) { return bf16_to_f32(bits); }
  static __device__ __forceinline__ u16 store(float value) { return f32_to_bf16(value); }
};
struct F16 {
  typedef u16 storage;
  static __device__ __forceinline__ float load(u16 bits) { return f16_to_f32(bits); }
  static __device__ __forceinline__ u16 store(float value) { return f32_to_f16(value); }
};
struct F32 {
  typedef float storage;
  static __device__ __forceinline__ float load(float value) { return value; }
  static __device__ __forceinline__ float store(float value) { return value; }
};

// ---- the tensor-core product: D(16x8, f32) += A(16x16) · B(16x8), 16-bit operands ----
// Fragments per lane (g = lane / 4, t = lane % 4), each u32 a pair of consecutive-k values:
//   a[0] = A[g][2t..2t+1]   a[1] = A[g+8][2t..2t+1]   a[2] = A[g][2t+8..]   a[3] = A[g+8][2t+8..]
//   b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..2t+9][g]
//   c[0] = D[g][2t]  c[1] = D[g][2t+1]  c[2] = D[g+8][2t]  c[3] = D[g+8][2t+1]
__device__ __forceinline__ void mma_bf16(float* c, const u32* a, const u32* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_f16(float* c, const u32* a, const u32* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- triangular tile scheduling: linear index -> (ti, tj) with ti <= tj ----
// Tiles are enumerated column by column of the upper triangle: index = tj(tj+1)/2 + ti.
__device__ __forceinline__ void upper_tile(int index, int& ti, int& tj) {
  int column = static_cast<int>((sqrtf(8.0f * static_cast<float>(index) + 1.0f) - 1.0f) * 0.5f);
  while (column * (column + 1) / 2 > index) --column;  // float rounding, either way
  while ((column + 1) * (column + 2) / 2 <= index) ++column;
  tj = column;
  ti = index - column * (column + 1) / 2;
}

// ---- block-wide f32/f64 sum in a fixed order (deterministic for a given block size) ----
template <typename T, int THREADS>
__device__ __forceinline__ T block_sum(T value, T* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
#pragma unroll
  for (int width = THREADS / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) scratch[threadIdx.x] += scratch[threadIdx.x + width];
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();
  return total;
}

}  // namespace oj
