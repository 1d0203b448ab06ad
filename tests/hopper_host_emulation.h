// Host emulation of kernels/cuda/orthojit_hopper_primitives.cuh, for tests/cuda_hopper_product_test.cpp:
// the sm_90a products (orthojit_hopper_product.cuh) compile unchanged as host C++ against this
// header (under the primitives' include name) and tests/cuda_host_emulation.h (under
// orthojit_device_primitives.cuh: one std::thread per CUDA thread, CTAs in turn, __syncthreads a
// barrier); tests/emulated_device_headers.h lays the files out.
// Test infrastructure, not product code. What is modelled, from the PTX ISA:
//
//   * The shared window: shared_address() of shared_memory[0] is kWindowOffset, deliberately not
//     1024-byte aligned, so the kernel's own alignment of its stages is exercised; addresses
//     outside the window abort.
//   * mbarrier: the 64-bit barrier word holds the pending arrivals, the expected arrivals, the
//     outstanding transaction bytes and the phase bit. A phase completes when arrivals and bytes
//     are both zero (the phase bit flips, the arrivals re-arm); try_wait.parity P succeeds once
//     the phase bit differs from P. An arrival on a barrier with none pending, more bytes
//     completed than expected, and a wait that lasts 20 s (a phase bug: the real kernel would
//     hang) abort with a message.
//   * TMA loads (cp.async.bulk.tensor.3d, tile mode): the box at (inner, outer) of one matrix of
//     the emulated tensor map (16-byte aligned base and rows, as cuTensorMapEncodeTiled demands),
//     zeros outside the tensor, written with the 128-byte swizzle of the destination's shared
//     addresses (which must be 1024-byte aligned; rows of exactly 128 bytes), then its bytes
//     completed on the barrier. TMA stores: the box read through the same swizzle, written inside
//     the tensor only; their bulk groups check at wait_group(.read) that the shared tile did not
//     change after the store was issued (the two races of an epilogue through shared memory).
//   * bar.sync 1 (the consumers' named barrier): a std::barrier of the 256 consumer threads.
//   * wgmma: asynchronous and collective as on the device. mma_async only records the operation;
//     commit_group closes a group; wait_group N completes the oldest groups until N remain, and
//     only then are shared memory read and the accumulators written, for the whole warpgroup at
//     once (a group completes when all 128 threads committed it). So a kernel that frees a stage
//     before the products reading it have completed reads the overwritten stage here too. Each
//     thread's 64 registers: the elements accumulator_coordinate gives, from A and B decoded
//     through the descriptors (start, LBO, SBO, swizzle mode) with the canonical layouts, k in
//     order in f32 (products of bf16 values are exact in f32).
//   * setmaxnreg and the fences: no effect on values (nothing to model on one host).
#pragma once

#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <thread>
#include <vector>

#include "orthojit_hopper_layout.cuh"

#define __grid_constant__

// The epilogue's 8-byte pair accesses; misaligned ones are faults on the device, aborts here.
struct alignas(8) float2 {
  float x = 0, y = 0;
  float2() = default;
  float2(float a, float b) : x(a), y(b) {}
  float2(const float2& other) : x(other.x), y(other.y) { check(&other); }
  float2& operator=(const float2& other) {
    check(this);
    x = other.x, y = other.y;
    return *this;
  }
  static void check(const void* at) {
    if (reinterpret_cast<std::uintptr_t>(at) % 8 != 0) {
      std::fprintf(stderr, "misaligned 8-byte access at %p\n", at);
      std::abort();
    }
  }
};
inline float2 make_float2(float x, float y) { return float2(x, y); }

namespace oj::hopper {

// What cuTensorMapEncodeTiled encodes, as plain fields: a 3-D tensor of 2- or 4-byte elements (a
// batch of matrices).
struct alignas(64) TensorMap {
  unsigned char* base = nullptr;
  u32 element_bytes = 2;
  u64 inner = 0, outer = 0;        // elements along the contiguous dimension, rows
  u64 row_elements = 0;            // the row stride in elements
  u64 matrices = 1, matrix_elements = 0;  // the batch and its stride in elements
  u32 box_inner = 0, box_outer = 0;
  Swizzle swizzle = Swizzle::Bytes128;
};
static_assert(sizeof(TensorMap) <= 128, "a tensor map is 128 bytes on the device");

[[noreturn]] inline void emulation_failure(const char* what) {
  std::fprintf(stderr, "hopper emulation: %s (block %u,%u thread %u)\n", what, blockIdx.x, blockIdx.y, threadIdx.x);
  std::fflush(stderr);
  std::abort();
}

constexpr u32 kWindowOffset = 0x2410;
inline unsigned char* dynamic_shared_window() { return shared_memory; }
inline u32 shared_address(const void* pointer) {
  const long offset = static_cast<const unsigned char*>(pointer) - shared_memory;
  if (offset < 0 || offset >= static_cast<long>(sizeof shared_memory)) emulation_failure("shared_address of a pointer outside shared memory");
  return kWindowOffset + static_cast<u32>(offset);
}
inline unsigned char* shared_pointer(u32 address) {
  if (address < kWindowOffset || address - kWindowOffset >= sizeof shared_memory) emulation_failure("a shared address outside the window");
  return shared_memory + (address - kWindowOffset);
}

// ---- mbarrier: bits 0-15 pending arrivals, 16-31 expected arrivals, 32-62 bytes, 63 phase ----
constexpr u64 kPhaseBit = u64{1} << 63;
inline u64 barrier_bytes(u64 state) { return (state >> 32) & 0x7fffffffu; }
template <class Change>
void barrier_update(u64* barrier, Change change) {
  std::atomic_ref<u64> word(*barrier);
  u64 old = word.load();
  for (;;) {
    u64 next = change(old);
    if ((next & 0xffff) == 0 && barrier_bytes(next) == 0) next = ((next ^ kPhaseBit) & ~u64{0xffff}) | ((next >> 16) & 0xffff);
    if (word.compare_exchange_weak(old, next)) return;
  }
}
inline u32 opaque_float_bits(float value) { return __float_as_uint(value); }  // the same bits; nothing to hide from a host compiler

inline void barrier_init(u64* barrier, u32 arrivals) { std::atomic_ref<u64>(*barrier).store(arrivals | (u64{arrivals} << 16)); }
inline void barrier_init_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void barrier_arrive(u64* barrier) {
  barrier_update(barrier, [](u64 state) {
    if ((state & 0xffff) == 0) emulation_failure("mbarrier arrival with no arrival pending");
    return state - 1;
  });
}
inline void barrier_arrive_expect_bytes(u64* barrier, u32 bytes) {
  barrier_update(barrier, [&](u64 state) {
    if ((state & 0xffff) == 0) emulation_failure("mbarrier arrival with no arrival pending");
    return (state - 1) + (u64{bytes} << 32);
  });
}
inline void barrier_complete_bytes(u64* barrier, u32 bytes) {
  barrier_update(barrier, [&](u64 state) {
    if (barrier_bytes(state) < bytes) emulation_failure("TMA completed more bytes than the barrier expects");
    return state - (u64{bytes} << 32);
  });
}
inline void barrier_wait(u64* barrier, u32 parity) {
  const auto started = std::chrono::steady_clock::now();
  std::atomic_ref<u64> word(*barrier);
  while (((word.load() & kPhaseBit) != 0) == (parity != 0)) {
    if (std::chrono::steady_clock::now() - started > std::chrono::seconds(20)) emulation_failure("mbarrier wait never completed (phase or arrival bug)");
    std::this_thread::yield();
  }
}

// ---- TMA ----
// The checks cuTensorMapEncodeTiled and the instruction make, for a box at shared `address`.
inline void check_box(const TensorMap* map, u32 address, int matrix) {
  if (map->swizzle != Swizzle::Bytes128) emulation_failure("only the 128-byte swizzle is modelled");
  if (address % kSwizzleAtomBytes != 0) emulation_failure("a 128-byte-swizzled TMA box in shared memory must be 1024-byte aligned");
  if (map->box_inner * map->element_bytes != kSwizzleBytes) emulation_failure("a 128-byte-swizzled box row must be 128 bytes");
  if ((map->row_elements * map->element_bytes) % 16 != 0 || (map->matrix_elements * map->element_bytes) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(map->base) % 16 != 0)
    emulation_failure("a tensor map's base and strides must be 16-byte aligned (cuTensorMapEncodeTiled refuses others)");
  if (matrix < 0 || static_cast<u64>(matrix) >= map->matrices) emulation_failure("a TMA box of a matrix outside the batch");
}
// Element (r, c) of the box at (inner, outer): its global address, or null outside the tensor.
inline unsigned char* box_element(const TensorMap* map, int inner, int outer, int matrix, u32 r, u32 c) {
  const long long row = static_cast<long long>(outer) + r, col = static_cast<long long>(inner) + c;
  if (row < 0 || col < 0 || row >= static_cast<long long>(map->outer) || col >= static_cast<long long>(map->inner)) return nullptr;
  return map->base + ((static_cast<u64>(matrix) * map->matrix_elements + static_cast<u64>(row) * map->row_elements + static_cast<u64>(col)) * map->element_bytes);
}
inline void tma_load_3d(void* destination, const TensorMap* map, int inner, int outer, int matrix, u64* barrier) {
  const u32 address = shared_address(destination);
  check_box(map, address, matrix);
  const u32 bytes = map->element_bytes;
  for (u32 r = 0; r < map->box_outer; ++r)
    for (u32 c = 0; c < map->box_inner; ++c) {
      const unsigned char* from = box_element(map, inner, outer, matrix, r, c);
      unsigned char* to = shared_pointer(swizzle_128b(address + r * kSwizzleBytes + c * bytes));
      if (from) std::memcpy(to, from, bytes);
      else std::memset(to, 0, bytes);
    }
  barrier_complete_bytes(barrier, map->box_inner * map->box_outer * bytes);
}

// TMA stores and their bulk groups. A store is carried out (global memory written, the tensor's
// edges clipped) from the shared bytes as they are at issue; wait_group.read then checks that those
// bytes are still what the store read. So both races of the real hardware fail here: a store
// issued before the threads' writes of its tile were done (the tile changes after the issue), and
// a tile rewritten before bulk_wait_read said the store had read it.
struct PendingStore {
  u32 address = 0;
  std::vector<unsigned char> snapshot;  // the box's shared bytes, in the order of its rows
};
struct BulkGroups {
  std::vector<PendingStore> open;
  std::deque<std::vector<PendingStore>> committed;
  ~BulkGroups() {
    if (!open.empty() || !committed.empty()) {
      std::fprintf(stderr, "hopper emulation: a thread ended with TMA stores it never waited for (bulk_wait)\n");
      std::abort();
    }
  }
};
inline thread_local BulkGroups bulk_groups;
inline void tma_store_3d(const TensorMap* map, int inner, int outer, int matrix, const void* source) {
  const u32 address = shared_address(source);
  check_box(map, address, matrix);
  const u32 bytes = map->element_bytes;
  PendingStore store;
  store.address = address;
  store.snapshot.resize(map->box_outer * kSwizzleBytes);
  for (u32 r = 0; r < map->box_outer; ++r)
    for (u32 c = 0; c < map->box_inner; ++c) {
      unsigned char* const snapshot = store.snapshot.data() + r * kSwizzleBytes + c * bytes;
      std::memcpy(snapshot, shared_pointer(swizzle_128b(address + r * kSwizzleBytes + c * bytes)), bytes);
      if (unsigned char* to = box_element(map, inner, outer, matrix, r, c)) std::memcpy(to, snapshot, bytes);
    }
  bulk_groups.open.push_back(std::move(store));
}
inline void bulk_commit() {
  bulk_groups.committed.push_back(std::move(bulk_groups.open));
  bulk_groups.open.clear();
}
inline void retire_bulk_groups(int pending) {
  while (static_cast<int>(bulk_groups.committed.size()) > pending) {
    for (const PendingStore& store : bulk_groups.committed.front())
      for (u32 at = 0; at < store.snapshot.size(); ++at)
        if (*shared_pointer(swizzle_128b(store.address + at)) != store.snapshot[at])
          emulation_failure("the shared tile of a TMA store changed between the store and its bulk_wait_read (written too late or rewritten too early)");
    bulk_groups.committed.pop_front();
  }
}
template <int kPending>
inline void bulk_wait_read() {
  retire_bulk_groups(kPending);
}
template <int kPending>
inline void bulk_wait() {
  retire_bulk_groups(kPending);
}
inline void fence_proxy_async_shared() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// Named barrier 1: the 256 consumer threads of the running CTA (CTAs run one at a time, and each
// consumer thread passes it equally often per CTA).
inline std::barrier<> consumer_sync{static_cast<std::ptrdiff_t>(kConsumerGroups * 128)};
inline void consumer_barrier() { consumer_sync.arrive_and_wait(); }

template <u32 kRegisters>
inline void registers_decrease() {}
template <u32 kRegisters>
inline void registers_increase() {}

// ---- wgmma: a warpgroup collective ----
// On the device one wgmma is one operation of the whole warpgroup: it can complete only once all
// 128 threads issued it, and then it has completed for all of them. So the emulation keeps each
// warpgroup's committed groups (by CTA and commit number) with every thread's products; the
// first thread whose wait_group needs a group waits until all 128 threads committed it, then
// runs the products of all of them (each writing its own thread's registers). A thread that
// releases a stage after its own wait_group thereby knows the stage is no longer read by any
// thread of its warpgroup, as on the device.
struct PendingProduct {
  float* d;
  u64 a, b;
  int accumulate;
  bool b_mn_major;
  u32 thread;     // within the warpgroup
  u32 registers;  // N / 2: the instruction's accumulator registers per thread (m64nNk16)
};
struct CommittedGroup {
  std::vector<PendingProduct> products;
  u32 committed = 0, waited = 0;
  bool done = false;
};
struct WarpgroupProducts {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::tuple<u32, u32, u64>, CommittedGroup> groups;  // (CTA, warpgroup, commit number)
};
inline WarpgroupProducts warpgroup_products;
inline thread_local std::vector<PendingProduct> open_group;
inline thread_local u64 commits = 0, completed = 0;
inline thread_local u32 commits_cta = ~0u;

inline float shared_bf16(u32 address) {
  unsigned short bits;
  std::memcpy(&bits, shared_pointer(swizzle_128b(address)), 2);
  return oj::bf16_to_f32(bits);
}
inline void run_product(const PendingProduct& p) {
  const Descriptor a = decode_descriptor(p.a), b = decode_descriptor(p.b);
  if (a.swizzle != Swizzle::Bytes128 || b.swizzle != Swizzle::Bytes128 || a.base_offset != 0 || b.base_offset != 0)
    emulation_failure("only base-offset-0 128-byte-swizzled descriptors are modelled");
  for (u32 r = 0; r < p.registers; ++r) {
    const Coordinate at = accumulator_coordinate(p.thread, r);
    float sum = 0.0f;
    for (u32 k = 0; k < 16; ++k) {
      const float x = shared_bf16(k_major_address(a, at.row, k));
      const float y = shared_bf16(p.b_mn_major ? mn_major_address(b, at.col, k) : k_major_address(b, at.col, k));
      sum += x * y;
    }
    p.d[r] = p.accumulate ? p.d[r] + sum : sum;
  }
}
inline u32 cta_index() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }
inline void start_cta_products() {
  if (commits_cta != cta_index()) {
    commits_cta = cta_index();
    commits = completed = 0;
    open_group.clear();
  }
}
inline void wgmma_fence() {}
inline void wgmma_commit() {
  start_cta_products();
  {
    std::lock_guard lock(warpgroup_products.mutex);
    CommittedGroup& group = warpgroup_products.groups[{cta_index(), threadIdx.x / 128, commits}];
    group.products.insert(group.products.end(), open_group.begin(), open_group.end());
    ++group.committed;
  }
  warpgroup_products.changed.notify_all();
  open_group.clear();
  ++commits;
}
template <int kPending>
inline void wgmma_wait() {
  start_cta_products();
  for (; completed + static_cast<u64>(kPending) < commits; ++completed) {
    std::unique_lock lock(warpgroup_products.mutex);
    const auto key = std::make_tuple(cta_index(), threadIdx.x / 128, completed);
    if (!warpgroup_products.changed.wait_for(lock, std::chrono::seconds(20), [&] { return warpgroup_products.groups[key].committed == 128; }))
      emulation_failure("a wgmma group that not all 128 threads of the warpgroup committed");
    CommittedGroup& group = warpgroup_products.groups[key];
    if (!group.done) {
      for (const PendingProduct& p : group.products) run_product(p);
      group.done = true;
    }
    if (++group.waited == 128) warpgroup_products.groups.erase(key);
  }
}
template <bool kBMnMajor>
inline void wgmma_m64n128k16_bf16(float (&d)[64], u64 a, u64 b, int accumulate) {
  start_cta_products();
  open_group.push_back({d, a, b, accumulate, kBMnMajor, threadIdx.x % 128, 64});
}
template <bool kBMnMajor>
inline void wgmma_m64n256k16_bf16(float (&d)[128], u64 a, u64 b, int accumulate) {
  start_cta_products();
  open_group.push_back({d, a, b, accumulate, kBMnMajor, threadIdx.x % 128, 128});
}
template <u32 kN, bool kBMnMajor>
inline void wgmma_bf16(float (&d)[kN / 2], u64 a, u64 b, int accumulate) {
  static_assert(kN == 128 || kN == 256, "the tile is 128 or 256 columns wide");
  if constexpr (kN == 128) wgmma_m64n128k16_bf16<kBMnMajor>(d, a, b, accumulate);
  else wgmma_m64n256k16_bf16<kBMnMajor>(d, a, b, accumulate);
}

}  // namespace oj::hopper
