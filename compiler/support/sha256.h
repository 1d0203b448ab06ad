// SHA-256 (FIPS 180-4), for cache keys and checksums: the program cache and the kernel cache key
// compiled code by a digest of everything that changes it (docs/cpu-backend.md "Caches",
// docs/cuda-backend.md), and checksum what they read back, as Muon state files do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace orthojit {

// The block function: the x86 SHA extensions where the CPU has them, else portable C++.
enum class Sha256Implementation { Automatic, Portable, X86ShaExtensions };

// The digest of `data` as 64 lowercase hex digits. X86ShaExtensions on a CPU without them throws
// std::runtime_error (the tests ask for each implementation by name).
std::string sha256_hex(std::string_view data, Sha256Implementation implementation = Sha256Implementation::Automatic);

// The same digest over data that arrives in pieces (a file streamed through a fixed buffer):
// update() any number of times, then hex_digest() once. Pieces of any length; the digest equals
// sha256_hex of their concatenation.
class Sha256 {
 public:
  explicit Sha256(Sha256Implementation implementation = Sha256Implementation::Automatic);
  void update(std::string_view data);
  std::string hex_digest();  // pads and finishes; update() after it throws std::logic_error
  uint64_t bytes() const { return length_; }

 private:
  void blocks(const unsigned char* data, size_t count);
  Sha256Implementation implementation_;
  uint32_t state_[8];
  unsigned char pending_[64];  // a partial block waiting for more data
  size_t pending_size_ = 0;
  uint64_t length_ = 0;
  bool finished_ = false;
};

// Whether this CPU runs the x86 SHA extensions (CPUID: SHA, SSSE3, SSE4.1).
bool sha256_x86_available();

namespace detail {
// FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64
// primes; both block functions add them round by round.
alignas(16) inline constexpr uint32_t kSha256RoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
    0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
    0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
    0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
    0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
    0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
bool sha256_x86_supported();
// `blocks` 64-byte blocks into `state` (A..H); sha256_x86.cpp. Only where sha256_x86_supported().
void sha256_blocks_x86(uint32_t state[8], const unsigned char* data, size_t blocks);
}  // namespace detail

}  // namespace orthojit
