// The CUDA program cache's file layout (see program_file.h).
#include "cuda/program_file.h"

#include <utility>

#include "support/sha256.h"

namespace orthojit::cuda {
namespace {

// Reads what ByteWriter wrote; every read is bounds-checked, and a failed read leaves the reader
// failed (later reads return nothing), so a damaged file cannot make it read out of bounds.
class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return bytes_.size() - position_; }
  std::string_view rest() const { return bytes_.substr(position_); }

  uint64_t u64() {
    if (!take(8)) return 0;
    uint64_t value = 0;
    for (int byte = 0; byte < 8; ++byte)
      value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[position_ - 8 + static_cast<size_t>(byte)])) << (8 * byte);
    return value;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  std::string text() { return std::string(text_view()); }
  // The text in place (valid while the bytes are): a cubin is copied once, into its destination.
  std::string_view text_view() {
    const uint64_t size = u64();
    if (!ok_ || size > remaining()) {
      ok_ = false;
      return {};
    }
    return raw(static_cast<size_t>(size));
  }
  std::string_view raw(size_t size) {
    if (!take(size)) return {};
    return bytes_.substr(position_ - size, size);
  }

 private:
  bool take(size_t size) {
    if (!ok_ || size > remaining()) {
      ok_ = false;
      return false;
    }
    position_ += size;
    return true;
  }

  std::string_view bytes_;
  size_t position_ = 0;
  bool ok_ = true;
};

std::string serialize_payload(const NvrtcOutput& output) {
  ByteWriter writer;
  writer.text(output.arch);
  writer.text(std::string_view(output.image.data(), output.image.size()));
  writer.text(output.log);
  writer.u64(output.resources.size());
  for (const auto& [kernel, resources] : output.resources) {
    writer.text(kernel);
    for (int value : {resources.registers, resources.spill_store_bytes, resources.spill_load_bytes, resources.stack_bytes, resources.shared_bytes})
      writer.i64(value);
  }
  writer.u64(output.options.size());
  for (const auto& option : output.options) writer.text(option);
  return std::move(writer.bytes());
}

std::optional<NvrtcOutput> deserialize_payload(std::string_view payload) {
  ByteReader reader(payload);
  NvrtcOutput output;
  output.arch = reader.text();
  const std::string_view image = reader.text_view();
  output.image.assign(image.begin(), image.end());
  output.log = reader.text();
  // Counts are checked against what is left (each entry takes at least 8 bytes), so a damaged
  // count cannot make the loop run for long.
  const uint64_t kernels = reader.u64();
  if (!reader.ok() || kernels > reader.remaining() / 8) return std::nullopt;
  for (uint64_t index = 0; index < kernels && reader.ok(); ++index) {
    std::string kernel = reader.text();
    KernelResources resources;
    for (int* field : {&resources.registers, &resources.spill_store_bytes, &resources.spill_load_bytes, &resources.stack_bytes, &resources.shared_bytes})
      *field = static_cast<int>(reader.i64());
    output.resources.emplace(std::move(kernel), resources);
  }
  const uint64_t options = reader.u64();
  if (!reader.ok() || options > reader.remaining() / 8) return std::nullopt;
  for (uint64_t index = 0; index < options && reader.ok(); ++index) output.options.push_back(reader.text());
  if (!reader.ok() || reader.remaining() != 0) return std::nullopt;
  return output;
}

}  // namespace

void ByteWriter::u64(uint64_t value) {
  for (int byte = 0; byte < 8; ++byte) bytes_.push_back(static_cast<char>((value >> (8 * byte)) & 0xffu));
}

void ByteWriter::text(std::string_view value) {
  u64(value.size());
  bytes_.append(value);
}

std::string serialize_program_file(const std::string& key, const NvrtcOutput& output) {
  const std::string payload = serialize_payload(output);
  ByteWriter writer;
  writer.raw(kProgramFileMagic);
  writer.u64(kProgramCacheFormatVersion);
  writer.text(key);
  writer.text(output.arch);
  writer.u64(payload.size());
  writer.text(sha256_hex(payload));
  writer.raw(payload);
  return std::move(writer.bytes());
}

std::optional<NvrtcOutput> deserialize_program_file(const std::string& bytes, const std::string& key, const std::string& arch) {
  ByteReader reader(bytes);
  if (reader.raw(kProgramFileMagic.size()) != kProgramFileMagic) return std::nullopt;
  if (reader.u64() != kProgramCacheFormatVersion) return std::nullopt;
  if (reader.text() != key) return std::nullopt;
  if (reader.text() != arch) return std::nullopt;
  const uint64_t payload_size = reader.u64();
  const std::string checksum = reader.text();
  if (!reader.ok() || payload_size != reader.remaining()) return std::nullopt;
  const std::string_view payload = reader.rest();
  if (sha256_hex(payload) != checksum) return std::nullopt;
  std::optional<NvrtcOutput> output = deserialize_payload(payload);
  if (!output || output->arch != arch) return std::nullopt;
  return output;
}

}  // namespace orthojit::cuda
