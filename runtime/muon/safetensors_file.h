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
//
// Files of any size go through a fixed buffer: SafetensorsWriter takes each tensor's bytes in
// pieces, in any order, written in place (so a rank can stream a partitioned optimizer state it
// never holds whole), and SafetensorsReader reads any piece of any tensor after checking the
// header alone. The checksum is computed while pieces arrive in the data's order (on a second
// thread beside the write or read for pieces of a megabyte and more: background_digest.h), and by
// one streaming pass over whatever was not (verify_checksum, commit; double-buffered the same way).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/muon/file_progress.h"
#include "support/sha256.h"

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

// A tensor's entry in a header: dtype, shape and its bytes [begin, end) of the data buffer.
struct TensorPlace {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorPlace> tensors;             // in the order of their data
  std::map<std::string, std::string> metadata;  // without kSafetensorsChecksumKey
  std::optional<std::string> checksum;
  uint64_t data_start = 0;  // where the data buffer begins in the file: 8 + the header's length
  uint64_t data_bytes = 0;
  const TensorPlace* find(const std::string& name) const;  // null when absent
  // The names' index, which find() uses while it covers every tensor (the parser and the writer
  // build it; a model's state has one tensor per buffer, 10^5 of them in a large MoE).
  std::map<std::string, size_t> by_name;
  void index_names();
};

// A tensor written from memory the caller keeps alive until write_safetensors_from returns.
struct TensorSource {
  TensorPlace place;  // name, dtype, shape (begin and end are laid out on writing)
  const void* bytes;  // product(shape) · dtype size bytes
};
void write_safetensors_from(const std::string& path, const std::vector<TensorSource>& tensors, const std::map<std::string, std::string>& metadata = {},
                            const FileProgressCallback& progress = {});

// Writes a file whose tensors are declared up front, laid out in the given order; their bytes
// come by write() in pieces of any size and order, each placed at its offset in a temporary file
// next to `path`. commit() checks that every byte was given, completes the checksum, flushes and
// renames the file into place; without a commit (an exception, an abandoned write) the temporary
// file is removed and `path` is untouched. Declaration errors are those of write_safetensors.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, const std::vector<TensorPlace>& tensors, const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  const SafetensorsHeader& header() const { return header_; }
  // `size` bytes of tensor `name` from byte `offset` of it. Throws std::out_of_range for a piece
  // outside the tensor or an unknown name, std::logic_error for a piece that overlaps one already
  // written, SafetensorsError when the file system refuses (the write is abandoned then).
  void write(const std::string& name, uint64_t offset, const void* data, uint64_t size);
  void commit();
  // Reports "write" (before the first piece and after each), "checksum" (commit's pass over what
  // did not arrive in order, when there is one) and "sync" (runtime/muon/file_progress.h).
  void set_progress(FileProgressCallback progress) { progress_ = std::move(progress); }

 private:
  [[noreturn]] void abandon(const std::string& problem);
  std::string path_, temporary_;
  int fd_ = -1;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
  std::map<uint64_t, uint64_t> written_;  // the data buffer's written ranges, merged: begin → end
  Sha256 digest_;
  uint64_t hashed_ = 0;  // the digest covers the data buffer's first hashed_ bytes
  FileProgressCallback progress_;
  uint64_t given_ = 0;  // bytes written so far
};

// Reads a file's header (every structural check of read_safetensors but the checksum, which needs
// all the data), then any piece of any tensor. verify_checksum() hashes, in one streaming pass,
// whatever the reads so far did not cover in order, and throws SafetensorsError on a mismatch.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const SafetensorsHeader& header() const { return header_; }
  // Throws std::out_of_range for a piece outside the tensor, SafetensorsError on a read error.
  void read(const TensorPlace& tensor, uint64_t offset, void* out, uint64_t size);
  void verify_checksum();
  // Reports "read" (before the first piece and after each) and "checksum" (verify_checksum's
  // pass, from the bytes the reads hashed in order) (runtime/muon/file_progress.h).
  void set_progress(FileProgressCallback progress) { progress_ = std::move(progress); }

 private:
  // Reads data bytes [begin, begin + size) into `out` (or, when null, through scratch buffers, to
  // hash them only), hashing those from hashed_ on when the piece reaches it, on a second thread
  // for large spans; calls after_block(end of the block) after each block when given.
  void read_and_hash(uint64_t begin, uint64_t size, char* out, const std::function<void(uint64_t)>& after_block);

  std::string path_;
  int fd_ = -1;
  SafetensorsHeader header_;
  Sha256 digest_;
  uint64_t hashed_ = 0;
  bool verified_ = false;
  std::string corrupt_;  // the mismatch verify_checksum found (thrown again by later calls)
  FileProgressCallback progress_;
  uint64_t read_ = 0;  // bytes read so far
};

}  // namespace orthojit::runtime
