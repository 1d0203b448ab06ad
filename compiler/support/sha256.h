// SHA-256 (FIPS 180-4), for cache keys: the program cache and the kernel cache key compiled code
// by a digest of everything that changes it (docs/cpu-backend.md "Caches", docs/cuda-backend.md).
#pragma once

#include <string>
#include <string_view>

namespace orthojit {

// The digest of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

}  // namespace orthojit
