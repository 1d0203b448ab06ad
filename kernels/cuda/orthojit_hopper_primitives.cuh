// The sm_90a primitives of orthojit's Hopper products, as inline PTX: what the host emulation
// (tests/hopper_host_emulation.h) replaces one for one, so that the kernels above them
// (orthojit_hopper_product.cuh) run unchanged on the CPU. Each says the PTX it issues; the
// semantics the emulation models are the PTX ISA's (sections named per primitive). Needs
// `--gpu-architecture=sm_90a`: wgmma and setmaxnreg exist only on the `a` target.
#pragma once

#include "orthojit_hopper_layout.cuh"

namespace oj::hopper {

// A TMA tensor map (CUtensorMap, 128 bytes, 64-byte aligned), encoded on the host by the
// driver's cuTensorMapEncodeTiled and passed as a `const __grid_constant__` kernel parameter.
struct __align__(64) TensorMap {
  u64 opaque[16];
};

// The kernel's dynamic shared memory (its start; the launch sizes it). A function rather than
// each entry kernel's own `extern __shared__` array, so that the host emulation can supply it.
__device__ __forceinline__ unsigned char* dynamic_shared_window() {
  extern __shared__ __align__(16) unsigned char oj_hopper_dynamic_shared[];
  return oj_hopper_dynamic_shared;
}

// The shared-memory address (the .shared window) of a pointer into shared memory.
__device__ __forceinline__ u32 shared_address(const void* pointer) { return static_cast<u32>(__cvta_generic_to_shared(pointer)); }

// The bits of an f32 value through a mov the compiler cannot see into, where __float_as_uint
// would let it rewrite the accumulators it reads as integer registers (see stored_bits).
__device__ __forceinline__ u32 opaque_float_bits(float value) {
  u32 bits;
  asm("mov.b32 %0, %1;" : "=r"(bits) : "f"(value));
  return bits;
}

// ---- mbarrier (PTX ISA "Parallel Synchronization and Communication Instructions: mbarrier") ----
// A phase completes when its pending arrivals reach zero and its transaction count is zero.
__device__ __forceinline__ void barrier_init(u64* barrier, u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals));
}
// Makes the initialised barriers visible to the async proxy (TMA) and the other threads.
__device__ __forceinline__ void barrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival that also expects `bytes` of TMA transactions in the current phase.
__device__ __forceinline__ void barrier_arrive_expect_bytes(u64* barrier, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(u64* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
}
// Waits until the phase of parity `parity` has completed (try_wait.parity: true once the
// barrier's current phase has a different parity; a fresh barrier is in phase 0, so waiting for
// parity 1 returns at once, which is how the producer's first pass over empty buffers goes).
__device__ __forceinline__ void barrier_wait(u64* barrier, u32 parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_again:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_again;\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// ---- TMA (PTX ISA "cp.async.bulk.tensor") ----
// The box at coordinates (inner, outer) of matrix `matrix` of `map` (3-D: a batch of matrices)
// into shared memory at `destination` (1024-byte aligned for the 128-byte swizzle); its bytes
// complete as transactions on `barrier`. Elements outside the matrix arrive as zeros (and still
// count as bytes): a box never reads the next matrix of the batch.
__device__ __forceinline__ void tma_load_3d(void* destination, const TensorMap* map, int inner, int outer, int matrix, u64* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(shared_address(destination)),
      "l"(reinterpret_cast<u64>(map)), "r"(inner), "r"(outer), "r"(matrix), "r"(shared_address(barrier))
      : "memory");
}

// The box at (inner, outer) of matrix `matrix` of `map` from shared memory at `source` (1024-byte
// aligned, laid out as the load's boxes are) to global memory; elements outside the tensor are not
// written. Asynchronous: the shared source may change only after bulk_wait_read, and the shared
// writes it reads must be made visible to the async proxy first (fence_proxy_async_shared).
__device__ __forceinline__ void tma_store_3d(const TensorMap* map, int inner, int outer, int matrix, const void* source) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(reinterpret_cast<u64>(map)), "r"(inner),
               "r"(outer), "r"(matrix), "r"(shared_address(source))
               : "memory");
}
// Closes this thread's group of bulk stores (PTX ISA "cp.async.bulk.commit_group").
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most kPending of this thread's bulk groups still read their shared sources
// ("cp.async.bulk.wait_group.read"): their shared memory may then be rewritten.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// Waits until at most kPending of this thread's bulk groups are incomplete (their global writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}
// Makes this thread's earlier generic-proxy shared writes visible to the async proxy (a TMA store
// issued after a barrier then reads them; PTX ISA "Memory Consistency Model: proxies").
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// ---- named barrier 1 (PTX ISA "bar.sync"): the consumer warpgroups only ----
// The producer warpgroup never takes part, so the consumers can meet in the epilogue while the
// producer is already loading the next work item's stages.
__device__ __forceinline__ void consumer_barrier() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumerGroups * 128) : "memory"); }

// ---- register reallocation (PTX ISA "setmaxnreg") ----
// The producer warpgroup gives registers back, the consumers take them (per-thread counts).
template <u32 kRegisters>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <u32 kRegisters>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// ---- WGMMA (PTX ISA "wgmma.mma_async", "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group") ----
// Orders the accumulator registers' earlier accesses before the next wgmma (required before the
// first wgmma and whenever the registers were touched by other instructions).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// D(64 x 128, f32) (+)= A(64 x 16, bf16, K-major in shared memory) · B(16 x 128, bf16), B K-major
// (kBMnMajor false: stored as N x K) or MN-major (true: stored K x N, read through the transpose
// of wgmma's imm-trans-b). accumulate = 0: D = A·B (scale-d false). 64 registers per thread
// (accumulator_coordinate says which element each holds).
template <bool kBMnMajor>
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], u64 a, u64 b, int accumulate) {
#define OJ_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, %67;\n"
      "}\n"
      : OJ_D8(0), OJ_D8(8), OJ_D8(16), OJ_D8(24), OJ_D8(32), OJ_D8(40), OJ_D8(48), OJ_D8(56)
      : "l"(a), "l"(b), "r"(accumulate), "n"(kBMnMajor ? 1 : 0));
#undef OJ_D8
}

// The same with N = 256 (the 128 x 256 tile): D(64 x 256, f32), 128 registers per thread.
template <bool kBMnMajor>
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], u64 a, u64 b, int accumulate) {
#define OJ_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, %131;\n"
      "}\n"
      : OJ_D8(0), OJ_D8(8), OJ_D8(16), OJ_D8(24), OJ_D8(32), OJ_D8(40), OJ_D8(48), OJ_D8(56), OJ_D8(64), OJ_D8(72), OJ_D8(80), OJ_D8(88), OJ_D8(96),
        OJ_D8(104), OJ_D8(112), OJ_D8(120)
      : "l"(a), "l"(b), "r"(accumulate), "n"(kBMnMajor ? 1 : 0));
#undef OJ_D8
}

// One k-step of 16 on a BN-wide tile: the instruction of that width.
template <u32 kN, bool kBMnMajor>
__device__ __forceinline__ void wgmma_bf16(float (&d)[kN / 2], u64 a, u64 b, int accumulate) {
  static_assert(kN == 128 || kN == 256, "the tile is 128 or 256 columns wide");
  if constexpr (kN == 128) wgmma_m64n128k16_bf16<kBMnMajor>(d, a, b, accumulate);
  else wgmma_m64n256k16_bf16<kBMnMajor>(d, a, b, accumulate);
}

}  // namespace oj::hopper
