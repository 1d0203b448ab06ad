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

// Whether this CPU runs the x86 SHA extensions (CPUID: SHA, SSSE3, SSE4.1).
bool sha256_x86_available();

namespace detail {
bool sha256_x86_supported();
// `blocks` 64-byte blocks into `state` (A..H); sha256_x86.cpp. Only where sha256_x86_supported().
void sha256_blocks_x86(uint32_t state[8], const unsigned char* data, size_t blocks);
}  // namespace detail

}  // namespace orthojit
