// The safetensors format: an 8-byte header length, a JSON header, the data buffer.
#include "runtime/muon/safetensors_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>

#include "support/sha256.h"

namespace orthojit::runtime {
namespace {

// The reference implementation refuses headers over 100 MB; so do we (a corrupt length field
// would otherwise make us allocate a huge buffer).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

[[noreturn]] void fail(const std::string& origin, const std::string& problem) {
  throw SafetensorsError(origin + ": not a valid safetensors file: " + problem);
}

// product(shape) · element_bytes, or nullopt on a negative dimension or an overflow.
std::optional<uint64_t> byte_count(const std::vector<int64_t>& shape, int element_bytes) {
  uint64_t count = static_cast<uint64_t>(element_bytes);
  for (int64_t dimension : shape) {
    if (dimension < 0) return std::nullopt;
    const auto d = static_cast<uint64_t>(dimension);
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / d) return std::nullopt;
    count *= d;
  }
  return count;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string errno_text() { return std::strerror(errno); }

// Writes all of `data` to `fd`; false (errno set) on failure.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

uint64_t read_u64_le(const std::string& bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return value;
}

int64_t read_nonnegative(const nlohmann::ordered_json& value, const std::string& origin, const std::string& what) {
  if (!value.is_number_unsigned()) fail(origin, what + " must be a non-negative integer, found " + value.dump());
  const uint64_t number = value.get<uint64_t>();
  if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(origin, what + " is too large: " + value.dump());
  return static_cast<int64_t>(number);
}

}  // namespace

const NamedTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& tensor : tensors)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

int safetensors_dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {{"F64", 8},  {"I64", 8},  {"U64", 8},     {"F32", 4},     {"I32", 4},
                                                    {"U32", 4},  {"F16", 2},  {"BF16", 2},    {"I16", 2},     {"U16", 2},
                                                    {"I8", 1},   {"U8", 1},   {"BOOL", 1},    {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::string serialize_safetensors(const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata,
                                  const std::string& origin) {
  auto refuse = [&](const std::string& problem) -> void { throw SafetensorsError(origin + ": cannot write: " + problem); };
  if (metadata.count(kSafetensorsChecksumKey))
    refuse(std::string("the metadata key \"") + kSafetensorsChecksumKey + "\" is reserved (the data's checksum is computed on writing)");
  std::set<std::string> names;
  uint64_t total = 0;
  for (const auto& tensor : tensors) {
    if (tensor.name.empty()) refuse("a tensor has an empty name");
    if (tensor.name == kMetadataKey) refuse("a tensor cannot be named \"__metadata__\"");
    if (!names.insert(tensor.name).second) refuse("two tensors are named \"" + tensor.name + "\"");
    const int element = safetensors_dtype_bytes(tensor.dtype);
    if (element == 0)
      refuse("tensor \"" + tensor.name + "\" has unknown dtype \"" + tensor.dtype +
             "\"; expected one of F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2");
    const auto expected = byte_count(tensor.shape, element);
    if (!expected) refuse("tensor \"" + tensor.name + "\" has an invalid shape " + shape_text(tensor.shape));
    if (*expected != tensor.bytes.size())
      refuse("tensor \"" + tensor.name + "\" of shape " + shape_text(tensor.shape) + " and dtype " + tensor.dtype + " needs " + std::to_string(*expected) +
             " bytes, has " + std::to_string(tensor.bytes.size()));
    total += *expected;
  }

  std::string buffer;
  buffer.reserve(total);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [key, value] : metadata) meta[key] = value;
  for (const auto& tensor : tensors) buffer.append(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
  meta[kSafetensorsChecksumKey] = sha256_hex(buffer);
  header[kMetadataKey] = meta;
  uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    const uint64_t end = offset + tensor.bytes.size();
    header[tensor.name] = {{"dtype", tensor.dtype}, {"shape", tensor.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string header_text = header.dump();
  while (header_text.size() % 8 != 0) header_text.push_back(' ');

  std::string file;
  file.reserve(8 + header_text.size() + buffer.size());
  uint64_t length = header_text.size();
  for (int i = 0; i < 8; ++i) {
    file.push_back(static_cast<char>(length & 0xff));
    length >>= 8;
  }
  file += header_text;
  file += buffer;
  return file;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  const std::string file = serialize_safetensors(tensors, metadata, path);
  // A unique temporary file next to the target (same file system, so the rename is atomic).
  std::string temporary = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) throw SafetensorsError(path + ": cannot create a temporary file next to it: " + errno_text());
  auto abandon = [&](const std::string& problem) {
    const std::string why = errno_text();
    ::close(fd);
    ::unlink(temporary.c_str());
    throw SafetensorsError(path + ": " + problem + ": " + why);
  };
  if (!write_all(fd, file.data(), file.size())) abandon("cannot write");
  if (::fchmod(fd, 0644) != 0) abandon("cannot set the file's permissions");
  if (::fsync(fd) != 0) abandon("cannot flush to disk");
  if (::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(temporary.c_str());
    throw SafetensorsError(path + ": cannot write: " + why);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temporary.c_str());
    throw SafetensorsError(path + ": cannot rename the temporary file into place: " + why);
  }
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& origin) {
  if (bytes.size() < 8) fail(origin, "the file has " + std::to_string(bytes.size()) + " bytes, fewer than the 8 of the header length");
  const uint64_t header_length = read_u64_le(bytes);
  const uint64_t available = bytes.size() - 8;
  if (header_length > available)
    fail(origin, "the header length " + std::to_string(header_length) + " goes beyond the end of the file (" + std::to_string(available) +
                     " bytes after the length; the file is truncated or not safetensors)");
  if (header_length > kMaxHeaderBytes) fail(origin, "the header length " + std::to_string(header_length) + " is over the 100 MB limit");
  if (header_length < 2) fail(origin, "the header length " + std::to_string(header_length) + " is too small for a JSON object");
  const std::string_view header_text(bytes.data() + 8, header_length);
  if (header_text.front() != '{') fail(origin, "the header does not start with '{' (not a JSON object)");

  // Parse, noticing duplicate names (nlohmann's parser would keep only the last).
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  using Json = nlohmann::ordered_json;  // the header's order breaks ties between empty tensors at one offset
  const Json::parser_callback_t track = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    else if (event == Json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    else if (event == Json::parse_event_t::key && depth == 1 && !open_objects.empty() && duplicate.empty() &&
             !open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json header;
  try {
    header = Json::parse(header_text.begin(), header_text.end(), track);
  } catch (const Json::exception& error) {
    fail(origin, std::string("the header is not valid JSON: ") + error.what());
  }
  if (!header.is_object()) fail(origin, "the header is not a JSON object");
  if (!duplicate.empty()) fail(origin, "the header names \"" + duplicate + "\" twice (duplicate tensor name)");

  SafetensorsFile result;
  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) fail(origin, "\"__metadata__\" must be an object of strings, found " + std::string(entry.type_name()));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(origin, "\"__metadata__\" value of \"" + key + "\" must be a string, found " + value.dump());
        if (key == kSafetensorsChecksumKey) result.checksum = value.get<std::string>();
        else result.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor \"" + name + "\"";
    if (!entry.is_object()) fail(origin, what + " must be an object with dtype, shape and data_offsets, found " + std::string(entry.type_name()));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key)) fail(origin, what + " has no \"" + key + "\"");
    NamedTensor tensor;
    tensor.name = name;
    if (!entry.at("dtype").is_string()) fail(origin, what + ": \"dtype\" must be a string, found " + entry.at("dtype").dump());
    tensor.dtype = entry.at("dtype").get<std::string>();
    const int element = safetensors_dtype_bytes(tensor.dtype);
    if (element == 0)
      fail(origin, what + " has unknown dtype \"" + tensor.dtype +
                       "\"; expected one of F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2");
    if (!entry.at("shape").is_array()) fail(origin, what + ": \"shape\" must be an array, found " + entry.at("shape").dump());
    for (const auto& dimension : entry.at("shape")) tensor.shape.push_back(read_nonnegative(dimension, origin, what + ": a dimension"));
    const auto& offsets = entry.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) fail(origin, what + ": \"data_offsets\" must be [begin, end], found " + offsets.dump());
    const auto begin = static_cast<uint64_t>(read_nonnegative(offsets[0], origin, what + ": the begin offset"));
    const auto end = static_cast<uint64_t>(read_nonnegative(offsets[1], origin, what + ": the end offset"));
    if (begin > end) fail(origin, what + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] that end before they begin");
    const auto expected = byte_count(tensor.shape, element);
    if (!expected) fail(origin, what + " has a shape too large to address: " + shape_text(tensor.shape));
    if (*expected != end - begin)
      fail(origin, what + " of shape " + shape_text(tensor.shape) + " and dtype " + tensor.dtype + " needs " + std::to_string(*expected) +
                       " bytes, but its data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] hold " + std::to_string(end - begin));
    spans.push_back({begin, end, result.tensors.size()});
    result.tensors.push_back(std::move(tensor));
  }

  // The tensors must tile the data buffer exactly.
  const uint64_t buffer_size = available - header_length;
  const size_t buffer_start = 8 + static_cast<size_t>(header_length);
  std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t cursor = 0;
  std::string previous;
  for (const Span& span : spans) {
    const std::string& name = result.tensors[span.index].name;
    const std::string range = "[" + std::to_string(span.begin) + ", " + std::to_string(span.end) + "]";
    if (span.end > buffer_size)
      fail(origin, "tensor \"" + name + "\" has data_offsets " + range + " beyond the data buffer's " + std::to_string(buffer_size) +
                       " bytes (the file is truncated or its offsets are out of range)");
    if (span.begin < cursor) fail(origin, "tensor \"" + name + "\" has data_offsets " + range + " that overlap those of \"" + previous + "\"");
    if (span.begin > cursor)
      fail(origin, "there is a gap of " + std::to_string(span.begin - cursor) + " bytes in the data buffer before tensor \"" + name + "\" (offset " +
                       std::to_string(cursor) + " to " + std::to_string(span.begin) + ")");
    cursor = span.end;
    if (span.end > span.begin) previous = name;
  }
  if (cursor != buffer_size)
    fail(origin, "the data buffer has " + std::to_string(buffer_size) + " bytes but the tensors cover " + std::to_string(cursor) + " (" +
                     std::to_string(buffer_size - cursor) + " unaccounted bytes at the end)");

  if (result.checksum) {
    const std::string actual = sha256_hex(std::string_view(bytes.data() + buffer_start, static_cast<size_t>(buffer_size)));
    if (actual != *result.checksum)
      throw SafetensorsError(origin + ": the data is corrupt: its SHA-256 is " + actual + " but the file's \"" + kSafetensorsChecksumKey + "\" says " +
                             *result.checksum);
  }

  // Tensors in the order of their data; copy the bytes.
  std::vector<NamedTensor> ordered;
  ordered.reserve(spans.size());
  for (const Span& span : spans) {
    NamedTensor& tensor = result.tensors[span.index];
    const auto* first = reinterpret_cast<const unsigned char*>(bytes.data()) + buffer_start + span.begin;
    tensor.bytes.assign(first, first + (span.end - span.begin));
    ordered.push_back(std::move(tensor));
  }
  result.tensors = std::move(ordered);
  return result;
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw SafetensorsError(path + ": cannot open for reading: " + errno_text());
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) throw SafetensorsError(path + ": cannot read: " + errno_text());
  return parse_safetensors(contents.str(), path);
}

}  // namespace orthojit::runtime
