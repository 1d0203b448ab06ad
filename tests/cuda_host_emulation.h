// Host emulation of the CUDA that orthojit generates, for the tests that run generated kernels on
// the CPU (tests/cuda_fused_small_test.cpp through fused_small_host_emulation.h, and
// tests/cuda_host_emulator.cpp for the per-op kernels of generate_cuda). Generated source compiles
// as plain C++ against this header in place of kernels/cuda/orthojit_device_primitives.cuh (the
// composed headers, orthojit_device.cuh and the product tiles, compile as they are;
// tests/emulated_device_headers.h lays the files out):
//
//   * CTAs run one at a time; a CTA is one std::thread per CUDA thread, __syncthreads() a
//     std::barrier. threadIdx and blockIdx are thread_local, gridDim and blockDim global.
//   * Static `__shared__` arrays (the per-op kernels' tiles and scratch) become function-local
//     statics: one object that the CTA's threads share, right because CTAs run one at a time.
//     They are all placed in one ELF section (oj_emulated_shared) that is poisoned before every
//     CTA, as `shared_memory` is: a device's shared memory starts each CTA with whatever the last
//     one left, never the zeros of a C++ static, so a kernel that reads an element it did not
//     write (a ragged tile's padding, a stage before its copy landed) reads NaN here too. GCC
//     ignores the section attribute on static locals of function templates (GCC bug 70435), so
//     the device templates declare theirs with OJ_TEMPLATE_SHARED, which here registers the array
//     (poisoned at its CTA's first use of it, and before every later CTA).
//     `extern __shared__` (the fused kernel's dynamic shared memory) cannot be `static`; a source
//     that declares only that defines OJ_EMULATION_DYNAMIC_SHARED_ONLY first, and the declaration
//     binds to `shared_memory` below (poisoned before every CTA).
//   * Only the PTX-backed vocabulary is replaced (conversions, mma, upper_tile, block_sum); the
//     conversions round as the device does (to nearest even). The m16n8k16 MMA is a warp
//     collective: every lane posts its fragments, then computes its own four outputs from the whole
//     warp's, as f32 sums in k order rounded to nearest. The device's MMA is not that: the PTX ISA
//     leaves the order and rounding of its inner sums unspecified, and measured tensor cores align
//     the exact products and truncate (Fasi et al., "Numerical behavior of NVIDIA tensor cores",
//     PeerJ Comput. Sci. 2021). So a product is never compared bit for bit with the device;
//     every device check is a tolerance argued from K·2^-24 per sum.
//   * uint4 checks the 16-byte alignment of every vector load and store: on the GPU a misaligned
//     one is a fault, here it aborts with a message.
//
// oj_emu::launch runs a whole grid of a kernel from an array of untyped pointers (see its comment). Not part of the build: the tests compile it with `c++`.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#ifdef OJ_EMULATION_DYNAMIC_SHARED_ONLY
#define __shared__
#else
#define __shared__ static __attribute__((section("oj_emulated_shared")))
#endif
// The linker's bounds of that section (weak: a source without static shared memory has none).
extern "C" char __start_oj_emulated_shared[] __attribute__((weak));
extern "C" char __stop_oj_emulated_shared[] __attribute__((weak));

namespace oj_emu {
// The static shared arrays of device templates (OJ_TEMPLATE_SHARED), by address: each is poisoned
// when a CTA's first thread reaches its declaration for the first time (every thread passes the
// declaration before it touches the array, and the lock orders the poisoning before any of them
// returns), and again before every later CTA (run_grid).
struct TemplateSharedArrays {
  std::mutex mutex;
  std::vector<std::pair<unsigned char*, size_t>> arrays;
};
inline TemplateSharedArrays template_shared_arrays;
inline void register_template_shared(void* address, size_t bytes) {
  std::lock_guard<std::mutex> lock(template_shared_arrays.mutex);
  for (const auto& known : template_shared_arrays.arrays)
    if (known.first == address) return;
  std::memset(address, 0xff, bytes);
  template_shared_arrays.arrays.emplace_back(static_cast<unsigned char*>(address), bytes);
}
inline void poison_template_shared() {
  std::lock_guard<std::mutex> lock(template_shared_arrays.mutex);
  for (const auto& known : template_shared_arrays.arrays) std::memset(known.first, 0xff, known.second);
}
}  // namespace oj_emu
#define OJ_TEMPLATE_SHARED(type, name, count) \
  static type name[count];                    \
  ::oj_emu::register_template_shared(name, sizeof name)
#define __restrict__

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 threadIdx;
inline thread_local Dim3 blockIdx;
inline Dim3 gridDim, blockDim;
inline std::barrier<>* cta_barrier;  // the running CTA's
// After each barrier the odd warps wait until the even ones have reached the next barrier (or
// exited; at most about 2 ms): the even warps run a whole phase ahead, as a device's warps may, so
// a write that other warps' reads of the same phase needed a barrier against (a cp.async refill
// issued before the barrier that guards its stage: the early copies below) lands before those
// reads, every time instead of almost never. Correct code cannot tell: within a phase no warp
// waits for another. Every fourth CTA (the first included) runs so: each runs the same code, and
// the waits would double the emulation's time in all of them.
inline std::atomic<long> even_warp_arrivals{0};  // the running CTA's even-warp threads' barrier arrivals (exits count 2^30)
inline thread_local long barriers_passed = 0;     // this thread's barriers in the running CTA
inline thread_local bool skewed_cta = false;      // whether the running CTA runs its even warps ahead
inline void __syncthreads() {
  const bool even = (threadIdx.x / 32) % 2 == 0;
  if (even) ++even_warp_arrivals;
  cta_barrier->arrive_and_wait();
  ++barriers_passed;
  if (even || !skewed_cta) return;
  const long even_threads = static_cast<long>(blockDim.x / 64 * 32 + std::min(32u, blockDim.x % 64));
  for (int spin = 0; spin < 100 && even_warp_arrivals.load() < (barriers_passed + 1) * even_threads; ++spin)
    std::this_thread::sleep_for(std::chrono::microseconds(20));
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
using std::sqrt;
// The kernel's `extern __shared__ unsigned char shared_memory[]` binds to this (one translation
// unit includes this header: the generated source's).
alignas(16) unsigned char shared_memory[256 * 1024];

struct alignas(16) uint4 {
  unsigned x = 0, y = 0, z = 0, w = 0;
  uint4() = default;
  uint4(unsigned a, unsigned b, unsigned c, unsigned d) : x(a), y(b), z(c), w(d) {}
  // Every copy from or to memory is a 16-byte vector access on the GPU: check its alignment.
  uint4(const uint4& other) : x(other.x), y(other.y), z(other.z), w(other.w) { check(&other); }
  uint4& operator=(const uint4& other) {
    check(this);
    check(&other);
    x = other.x, y = other.y, z = other.z, w = other.w;
    return *this;
  }
  static void check(const void* at) {
    if (reinterpret_cast<std::uintptr_t>(at) % 16 != 0) {
      std::fprintf(stderr, "misaligned 16-byte access at %p (block %u,%u,%u thread %u)\n", at, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
      std::abort();
    }
  }
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4(x, y, z, w); }

namespace oj {

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

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

// float64 arithmetic (the device's _rn intrinsics; compiled with -ffp-contract=off) and the
// one-rounding conversions from f64, as orthojit_device_primitives.cuh computes them.
inline double f64_add(double a, double b) { return a + b; }
inline double f64_sub(double a, double b) { return a - b; }
inline double f64_mul(double a, double b) { return a * b; }
inline double f64_div(double a, double b) { return a / b; }
inline double f64_sqrt(double a) { return std::sqrt(a); }
inline float f64_to_f32(double value) { return static_cast<float>(value); }
inline float f32_add(float a, float b) { return a + b; }
inline float f32_mul(float a, float b) { return a * b; }
inline float f32_div(float a, float b) { return a / b; }
inline double f64_from_bits(u64 bits) {
  double value;
  std::memcpy(&value, &bits, 8);
  return value;
}
inline float f64_to_f32_odd(double value) {  // __double2float_rz, then the sticky bit
  float f = static_cast<float>(value);
  if (std::fabs(static_cast<double>(f)) > std::fabs(value)) f = std::nextafter(f, 0.0f);
  if (static_cast<double>(f) != value && value == value) {
    u32 bits;
    std::memcpy(&bits, &f, 4);
    bits |= 1u;
    std::memcpy(&f, &bits, 4);
  }
  return f;
}
inline u16 f64_to_bf16(double value) { return f32_to_bf16(f64_to_f32_odd(value)); }
inline u16 f64_to_f16(double value) { return f32_to_f16(f64_to_f32_odd(value)); }

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

// One warp's MMA exchange: the lanes' fragments (two sets, alternating between calls) and a
// barrier that makes it a collective. One barrier per MMA suffices: a lane can post call n + 2's
// fragments into the set call n used only after every lane arrived at call n + 1, that is, after
// every lane finished reading call n's.
struct WarpState {
  std::barrier<> barrier{32};
  u32 a[2][32][4], b[2][32][2];
  // ldmatrix's exchange: the row addresses the lanes give (two sets, as for the MMA).
  std::barrier<> ldmatrix_barrier{32};
  const u16* rows[2][32];
  // shfl.sync's exchange: the value each lane gives (two sets, as for the MMA).
  std::barrier<> shfl_barrier{32};
  u32 shfl[2][32];
};
inline std::unique_ptr<WarpState[]> warps;  // one per warp of the running CTA
inline thread_local unsigned mma_calls;     // this lane's MMAs in the running CTA
inline thread_local unsigned ldmatrix_calls;  // this lane's ldmatrix calls in the running CTA
inline thread_local unsigned shfl_calls;      // this lane's shuffles in the running CTA

// shfl.sync.bfly.b32 with a full member mask (oj::shfl_xor): a warp collective, every lane posts
// its value and takes lane (lane ^ mask)'s.
inline u32 shfl_xor(u32 value, int mask) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  WarpState& state = warps[warp];
  const unsigned set = shfl_calls++ % 2;
  state.shfl[set][lane] = value;
  state.shfl_barrier.arrive_and_wait();
  return state.shfl[set][lane ^ mask];
}

// D(16x8) += A(16x16)·B(16x8) with the fragment layout documented at oj::mma_bf16.
inline void mma_16x8x16(bool bf16, float* c, const u32* a, const u32* b) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  WarpState& state = warps[warp];
  const unsigned set = mma_calls++ % 2;
  for (int q = 0; q < 4; ++q) state.a[set][lane][q] = a[q];
  for (int q = 0; q < 2; ++q) state.b[set][lane][q] = b[q];
  state.barrier.arrive_and_wait();
  auto value = [&](u32 pair, int k) {
    const u16 bits = static_cast<u16>(k % 2 ? pair >> 16 : pair & 0xffffu);
    return bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  };
  // A[r][k] is in lane (r % 8)·4 + (k % 8)/2, register (r >= 8) + 2·(k >= 8); B[k][n] in lane
  // n·4 + (k % 8)/2, register (k >= 8).
  auto a_at = [&](int r, int k) { return value(state.a[set][(r % 8) * 4 + (k % 8) / 2][(r < 8 ? 0 : 1) + (k < 8 ? 0 : 2)], k); };
  auto b_at = [&](int k, int n) { return value(state.b[set][n * 4 + (k % 8) / 2][k < 8 ? 0 : 1], k); };
  for (int q = 0; q < 4; ++q) {
    const int row = g + (q / 2) * 8, col = 2 * t + q % 2;
    float sum = c[q];
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    c[q] = sum;
  }
}
// ldmatrix.sync.aligned.m8n8.{x2,x4}.trans.shared.b16 (see orthojit_device_primitives.cuh): the lanes post a
// row address each (lanes 8j..8j+7 matrix j's rows; 16-byte aligned, checked), then lane (g, t)
// takes element g of rows 2t and 2t+1 of each matrix.
template <int MATRICES>
inline void ldmatrix_trans(u32* r, const u16* row) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  WarpState& state = warps[warp];
  const unsigned set = ldmatrix_calls++ % 2;
  if (lane < 8 * MATRICES && reinterpret_cast<std::uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "ldmatrix: misaligned row address %p (block %u,%u,%u thread %u)\n", static_cast<const void*>(row), blockIdx.x, blockIdx.y,
                 blockIdx.z, threadIdx.x);
    std::abort();
  }
  state.rows[set][lane] = row;
  state.ldmatrix_barrier.arrive_and_wait();
  for (int j = 0; j < MATRICES; ++j)
    r[j] = static_cast<u32>(state.rows[set][8 * j + 2 * t][g]) | static_cast<u32>(state.rows[set][8 * j + 2 * t + 1][g]) << 16;
}
inline void ldmatrix_x2_trans(u32* r, const u16* row) { ldmatrix_trans<2>(r, row); }
inline void ldmatrix_x4_trans(u32* r, const u16* row) { ldmatrix_trans<4>(r, row); }

// cp.async: a chunk's bytes are read when it is issued (the sources do not change during a
// kernel) and land in shared memory at either end of what the ISA allows: half of the chunks (by a
// fixed pattern of destination and thread, so every stage has both) as soon as they are issued,
// the others only when a wait_group retires their group. So a kernel that reads a stage before
// waiting for it sees stale or poisoned data (the late ones), and one that refills a stage before
// every thread has finished reading it (a missing barrier) overwrites data still in use (the
// early ones), as the device may do either.
struct PendingCopy {
  void* destination;
  unsigned char bytes[16];
};
inline thread_local std::vector<PendingCopy> open_copies;
inline thread_local std::vector<std::vector<PendingCopy>> committed_copies;
inline void cp_async_16(void* destination, const void* source, bool valid) {
  if (reinterpret_cast<std::uintptr_t>(destination) % 16 != 0 || (valid && reinterpret_cast<std::uintptr_t>(source) % 16 != 0)) {
    std::fprintf(stderr, "cp.async: misaligned 16-byte copy %p <- %p (block %u,%u,%u thread %u)\n", destination, source, blockIdx.x, blockIdx.y,
                 blockIdx.z, threadIdx.x);
    std::abort();
  }
  PendingCopy copy{destination, {}};
  if (valid) std::memcpy(copy.bytes, source, 16);
  // A hash, not the low bits: a thread's chunks often share the parity of its index.
  const std::uint64_t mixed = (static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(destination) >> 4) * 0x9E3779B97F4A7C15ull) ^
                              (static_cast<std::uint64_t>(threadIdx.x) * 0xC2B2AE3D27D4EB4Full);
  if ((mixed >> 33) & 1) {
    std::memcpy(destination, copy.bytes, 16);  // landed at once
    return;
  }
  open_copies.push_back(copy);
}
inline void cp_async_commit() {
  committed_copies.push_back(std::move(open_copies));
  open_copies.clear();
}
template <int N>
inline void cp_async_wait() {
  while (committed_copies.size() > static_cast<size_t>(N)) {
    for (const PendingCopy& copy : committed_copies.front()) std::memcpy(copy.destination, copy.bytes, 16);
    committed_copies.erase(committed_copies.begin());
  }
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

template <typename T, int THREADS>
T block_max(T value, T* scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int width = THREADS / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) scratch[threadIdx.x] = std::fmax(scratch[threadIdx.x], scratch[threadIdx.x + width]);
    __syncthreads();
  }
  const T total = scratch[0];
  __syncthreads();
  return total;
}

inline float norm_scale(double largest) {
  if (!(largest > 0) || std::isinf(largest)) return 1.0f;
  int exponent = 0;
  std::frexp(largest, &exponent);
  exponent = exponent < -126 ? -126 : exponent > 126 ? 126 : exponent;
  return std::ldexp(1.0f, -exponent);
}

}  // namespace oj

namespace oj_emu {

// Runs `body` (one CUDA thread's work, reading threadIdx and blockIdx) for every thread of every
// CTA of `grid` x `block`, CTAs in order x fastest, then y, then z. The threads live for the whole
// grid and meet at a barrier between CTAs (whose completion resets the per-CTA state). A thread
// that returns early leaves the CTA's barrier (arrive_and_drop), as an exited CUDA thread no
// longer holds up bar.sync.
template <class Body>
void run_grid(const unsigned grid[3], unsigned block, Body body) {
  gridDim = {grid[0], grid[1], grid[2]};
  blockDim = {block, 1, 1};
  std::optional<std::barrier<>> cta;
  auto next_cta = [&]() noexcept {
    cta.emplace(static_cast<std::ptrdiff_t>(block));
    cta_barrier = &*cta;
    oj::warps.reset(new oj::WarpState[(block + 31) / 32]);
    even_warp_arrivals = 0;
    std::memset(shared_memory, 0xff, sizeof shared_memory);  // NaN bits in bf16, f16, f32 and f64
    if (__start_oj_emulated_shared && __stop_oj_emulated_shared > __start_oj_emulated_shared)
      std::memset(__start_oj_emulated_shared, 0xff, static_cast<size_t>(__stop_oj_emulated_shared - __start_oj_emulated_shared));
    oj_emu::poison_template_shared();
  };
  next_cta();
  std::barrier between(static_cast<std::ptrdiff_t>(block), next_cta);
  std::vector<std::thread> threads;
  threads.reserve(block);
  for (unsigned tid = 0; tid < block; ++tid)
    threads.emplace_back([&, tid] {
      threadIdx = {tid, 0, 0};
      for (unsigned z = 0; z < grid[2]; ++z)
        for (unsigned y = 0; y < grid[1]; ++y)
          for (unsigned x = 0; x < grid[0]; ++x) {
            blockIdx = {x, y, z};
            oj::mma_calls = 0;
            oj::ldmatrix_calls = 0;
            oj::shfl_calls = 0;
            barriers_passed = 0;
            skewed_cta = (x + grid[0] * (y + grid[1] * z)) % 4 == 0;
            body();
            if ((tid / 32) % 2 == 0) even_warp_arrivals += 1L << 30;  // exited: at every later barrier
            cta_barrier->arrive_and_drop();
            between.arrive_and_wait();
          }
    });
  for (auto& thread : threads) thread.join();
  cta_barrier = nullptr;
}

// A kernel argument from its untyped slot: a pointer parameter is the slot itself; a by-value one
// (the sm_90a tile's __grid_constant__ tensor maps) is the object the slot points at.
template <class Param>
Param argument(void* slot) {
  if constexpr (std::is_pointer_v<Param>) return static_cast<Param>(slot);
  else return *static_cast<const std::remove_cv_t<Param>*>(slot);
}

// A kernel called with args[k] converted to the k-th parameter's type (deduced from the kernel's
// own declaration, so no signature is parsed or repeated). Returns -1, running nothing, when the
// argument count is not the kernel's arity.
template <class... Params>
int launch(void (*kernel)(Params...), void* const* args, int count, const unsigned grid[3], unsigned block) {
  if (count != static_cast<int>(sizeof...(Params))) return -1;
  run_grid(grid, block, [&] { [&]<std::size_t... I>(std::index_sequence<I...>) { kernel(argument<Params>(args[I])...); }(std::index_sequence_for<Params...>{}); });
  return 0;
}

}  // namespace oj_emu
