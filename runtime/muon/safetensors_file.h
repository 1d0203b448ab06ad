// Reading and writing the safetensors format (https://github.com/huggingface/safetensors), the
// file format of Hugging Face checkpoints, used here for optimizer state:
//
//   8 bytes      N, the header's length, unsigned little-endian
//   N bytes      a JSON object, padded with spaces to a multiple of 8:
//                  {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//                   "__metadata__": {"<key>": "<string value>", ...}}
//   the rest     the data buffer; each tensor's bytes are [begin, end) of it, row-major,
//                little-endian; the tensors cover the buffer exactly (no gaps, no overlaps)
//
// orthojit adds an integrity check inside the format's own metadata: "__metadata__" carries
// "orthojit.sha256", the SHA-256 of the data buffer, verified on reading when present (files from
// other tools, without it, still load). Every structural problem is a SafetensorsError naming the
// file and the problem; writes are atomic (a temporary file in the same directory renamed over
// the target; nothing is left behind on failure).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace orthojit::runtime {

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The metadata key of the data buffer's SHA-256 (64 lowercase hex digits).
inline constexpr const char* kSafetensorsChecksumKey = "orthojit.sha256";

struct NamedTensor {
  std::string name;
  std::string dtype;             // "F32", "I64", "BF16", "F16", ... (safetensors_dtype_bytes)
  std::vector<int64_t> shape;    // {} is a scalar (one element)
  std::vector<unsigned char> bytes;  // row-major, little-endian; product(shape) · dtype size bytes
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;            // in the order of their data in the file
  std::map<std::string, std::string> metadata;  // "__metadata__" without kSafetensorsChecksumKey
  std::optional<std::string> checksum;          // the verified SHA-256, when the file had one
  const NamedTensor* find(const std::string& name) const;  // null when absent
};

// Bytes per element of a safetensors dtype: F64 I64 U64 8; F32 I32 U32 4; F16 BF16 I16 U16 2;
// I8 U8 BOOL F8_E4M3 F8_E5M2 1. 0 for anything else.
int safetensors_dtype_bytes(const std::string& dtype);

// Throws SafetensorsError for an invalid tensor (unknown dtype, a negative dimension, a byte count
// that is not product(shape) · dtype size, an empty or duplicate name, "__metadata__" as a name)
// or when the file cannot be written; the target is untouched then. `metadata` must not contain
// kSafetensorsChecksumKey (it is computed).
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata = {});

SafetensorsFile read_safetensors(const std::string& path);

// The same from bytes in memory; `origin` names them in errors.
std::string serialize_safetensors(const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata,
                                  const std::string& origin);
SafetensorsFile parse_safetensors(const std::string& file_bytes, const std::string& origin);

}  // namespace orthojit::runtime
