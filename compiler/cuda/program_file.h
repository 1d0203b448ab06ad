// The byte layout of a CUDA program cache file (docs/cuda-backend.md, "Program cache"), apart
// from the cache that stores and finds the files (program_cache.h). It needs neither NVRTC nor
// a GPU, so the file reader can be tested and fuzzed anywhere (tests/fuzz/fuzz_program_cache.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cuda/nvrtc_compiler.h"

namespace orthojit::cuda {

// Bumped whenever the file layout or the key's recipe changes (old files then simply miss).
constexpr uint32_t kProgramCacheFormatVersion = 1;
// The first bytes of every cache file: says what the file is to a person running `head` on it.
constexpr std::string_view kProgramFileMagic = "orthojit cuda program\n";

// Fields are length-prefixed, little-endian, so that no two different inputs serialize (or
// hash, for the key) the same: ("ab", "c") and ("a", "bc") must not collide.
class ByteWriter {
 public:
  void u64(uint64_t value);
  void i64(int64_t value) { u64(static_cast<uint64_t>(value)); }
  void text(std::string_view value);
  void raw(std::string_view value) { bytes_.append(value); }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

// A cache file's bytes: header (magic, format version, key, arch, payload size, payload SHA-256)
// followed by the payload (the whole NvrtcOutput: image, log, per-kernel resources, options).
std::string serialize_program_file(const std::string& key, const NvrtcOutput& output);
// The output stored in `bytes`, or nullopt when anything (magic, version, key, arch, size,
// checksum, payload layout) does not match.
std::optional<NvrtcOutput> deserialize_program_file(const std::string& bytes, const std::string& key, const std::string& arch);

}  // namespace orthojit::cuda
