// Grow-only, 64-byte aligned scratch memory. Threads keep one per use (packing buffers, the f32
// accumulator, the planned IR buffers) and reuse it from call to call instead of allocating and
// page-faulting tens of MiB each time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

namespace orthojit::cpu {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(AlignedBuffer&& other) noexcept : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  // At least `bytes` bytes (contents unspecified after growing).
  void* get(size_t bytes) {
    if (bytes > bytes_) {
      std::free(data_);
      bytes_ = (std::max<size_t>(bytes, 4096) + 4095) / 4096 * 4096;
      data_ = std::aligned_alloc(64, bytes_);
      if (!data_) {
        bytes_ = 0;
        throw std::bad_alloc();
      }
    }
    return data_;
  }
  float* floats(int64_t count) { return static_cast<float*>(get(static_cast<size_t>(count) * sizeof(float))); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace orthojit::cpu
