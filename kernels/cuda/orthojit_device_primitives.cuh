// orthojit's device primitives: every instruction generated CUDA code uses besides plain C++ (storage
// conversions, the tensor-core MMA, ldmatrix, cp.async, shuffles, block reductions), written as
// inline PTX here, in one place. It is embedded in the binary and handed to NVRTC as a named
// header, so compiling a kernel needs no CUDA toolkit headers on the user's machine (no
// cuda_bf16.h, no mma.h). This is the part the host emulation (tests/cuda_host_emulation.h)
// replaces one for one; everything composed from it (orthojit_device.cuh, orthojit_mma_product.cuh)
// runs unchanged in the emulation.
//
// Conventions: 16-bit storage is carried as raw bits (unsigned short); arithmetic is f32.
#pragma once

// A static shared array declared inside a device template (`OJ_TEMPLATE_SHARED(__align__(128) u16,
// stages, N);`): here a plain `__shared__` declaration. The host emulation turns `__shared__` into a
// C++ static placed in a section it poisons before every CTA, but GCC ignores section attributes on
// the static locals of templates (GCC bug 70435), so there this macro registers the array instead
// (poisoned at its first use and before every later CTA). Outside templates, plain `__shared__`.
#define OJ_TEMPLATE_SHARED(type, name, count) __shared__ type name[count]

namespace oj {

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

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

// ---- float64 arithmetic for the optimizer's element-wise kernels (elementwise_codegen.h) ----
// The _rn intrinsics are never contracted into FMAs, so the kernels round exactly where the C++
// update rules (runtime/muon/update_rules.cpp) round: same expression, same bits.
__device__ __forceinline__ double f64_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double f64_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double f64_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double f64_div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double f64_sqrt(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ float f64_to_f32(double value) { return __double2float_rn(value); }
// A double passed as its 64 bits (the Muon step's argument block, ir/muon_step.h).
// f32 add and divide with IEEE rounding whatever the compile flags (the ZeRO step's
// accumulation and average must give the host's bits).
__device__ __forceinline__ float f32_add(float a, float b) { return __fadd_rn(a, b); }
// The product epilogues' α·acc + β·C too: NVRTC contracts a plain `v += β * c` into one FMA
// (--fmad=true), which the host emulation (-ffp-contract=off) and the CPU backend do not; with the
// _rn forms the device rounds where they do.
__device__ __forceinline__ float f32_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float f32_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double f64_from_bits(u64 bits) { return __longlong_as_double(static_cast<long long>(bits)); }
// f64 to a 16-bit type with one rounding: to f32 rounding to odd (toward zero, then the last bit
// set when inexact), then to nearest even; correct because f32 carries more than two bits beyond
// bf16's 8 and f16's 11 (rounding to odd first never double-rounds).
__device__ __forceinline__ float f64_to_f32_odd(double value) {
  float f = __double2float_rz(value);
  if (static_cast<double>(f) != value && value == value) f = __uint_as_float(__float_as_uint(f) | 1u);
  return f;
}
__device__ __forceinline__ u16 f64_to_bf16(double value) { return f32_to_bf16(f64_to_f32_odd(value)); }
__device__ __forceinline__ u16 f64_to_f16(double value) { return f32_to_f16(f64_to_f32_odd(value)); }

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

// ---- ldmatrix: 8x8 b16 matrices from shared memory, a warp collective (PTX ISA, "ldmatrix") ----
// .x2.trans: lanes 0-15 give the 16-byte-aligned address of one row of 8 values each (lanes 0-7
// the rows of matrix 0, 8-15 those of matrix 1); lane (g = lane / 4, t = lane % 4) receives
// r[j] = M_j[2t][g] | M_j[2t + 1][g] << 16: with k rows and n columns stored, exactly the m16n8k16
// B fragment (b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]) of an n-contiguous B, without the
// transposing stores into shared memory that such a B would otherwise need.
// (volatile: it reads shared memory the compiler does not see, so it must stay after the barrier
// that publishes the tile.)
__device__ __forceinline__ void ldmatrix_x2_trans(u32* r, const u16* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
}
// .x4.trans: four matrices, lanes 8j..8j+7 giving the rows of matrix j; r[j] as above. Two B
// fragments (two 8-column groups) in one instruction.
__device__ __forceinline__ void ldmatrix_x4_trans(u32* r, const u16* row) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// ---- cp.async: global -> shared without registers (sm_80+; PTX ISA, "cp.async") ----
// One 16-byte chunk; `valid` false copies nothing and zero-fills (the source size operand 0), so
// tile edges need no branch around the copy. .cg: cached in L2 only (operands are streamed).
__device__ __forceinline__ void cp_async_16(void* shared_destination, const void* global_source, bool valid) {
  const unsigned destination = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(destination), "l"(global_source), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// ---- shfl.sync.bfly: the value of lane (this lane ^ mask) of the warp, every lane taking part ----
__device__ __forceinline__ u32 shfl_xor(u32 value, int mask) { return __shfl_xor_sync(0xffffffffu, value, mask); }

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

// ---- block-wide max (any order gives the same value) ----
template <typename T, int THREADS>
__device__ __forceinline__ T block_max(T value, T* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
#pragma unroll
  for (int width = THREADS / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) scratch[threadIdx.x] = fmax(scratch[threadIdx.x], scratch[threadIdx.x + width]);
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();
  return total;
}

// The norm's power-of-two scale 2^-e, e the exponent of the largest |x| kept in [-126, 126]; 1 for
// a zero or non-finite maximum (compiler/ir/norm_scale.h, the same function on the host).
__device__ __forceinline__ float norm_scale(double largest) {
  if (!(largest > 0) || isinf(largest)) return 1.0f;
  int exponent = 0;
  frexp(largest, &exponent);
  exponent = exponent < -126 ? -126 : exponent > 126 ? 126 : exponent;
  return ldexpf(1.0f, -exponent);
}

}  // namespace oj
