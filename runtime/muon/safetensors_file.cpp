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
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>

#include "runtime/muon/background_digest.h"
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

// The pieces a checksum or a copy streams through.
constexpr uint64_t kStreamBufferBytes = uint64_t{8} << 20;
// A BackgroundDigest for `digest` when `bytes` are worth a thread and one starts; null otherwise
// (the caller then hashes inline, as it does for small pieces).
std::unique_ptr<BackgroundDigest> digest_beside(Sha256& digest, uint64_t bytes) {
  if (bytes < BackgroundDigest::kWorthwhileBytes) return nullptr;
  try {
    return std::make_unique<BackgroundDigest>(digest);
  } catch (const std::system_error&) {
    return nullptr;
  }
}

// What the checksum's place in a header holds until the data is complete (same length).
const std::string kChecksumPlaceholder(64, '0');

// pwrite / pread of all `size` bytes at `offset`; false on failure (errno set; 0 at an early end
// of file).
bool write_all_at(int fd, const char* data, uint64_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t written = ::pwrite(fd, data, static_cast<size_t>(std::min<uint64_t>(size, uint64_t{1} << 30)), static_cast<off_t>(offset));
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<uint64_t>(written);
    offset += static_cast<uint64_t>(written);
  }
  return true;
}

bool read_all_at(int fd, char* data, uint64_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t got = ::pread(fd, data, static_cast<size_t>(std::min<uint64_t>(size, uint64_t{1} << 30)), static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (got == 0) {
      errno = 0;
      return false;
    }
    data += got;
    size -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

// Why read_all_at failed: errno's text, or an early end of file.
std::string read_failure() { return errno != 0 ? errno_text() : std::string("the file ended early (was it truncated?)"); }

uint64_t read_u64_le(std::string_view bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return value;
}

int64_t read_nonnegative(const nlohmann::json& value, const std::string& origin, const std::string& what) {
  if (!value.is_number_unsigned()) fail(origin, what + " must be a non-negative integer, found " + value.dump());
  const uint64_t number = value.get<uint64_t>();
  if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(origin, what + " is too large: " + value.dump());
  return static_cast<int64_t>(number);
}


// Checks tensors to be written and lays them out one after another in the given order: the
// header a writer declares. Throws SafetensorsError "<origin>: cannot write: ...".
SafetensorsHeader lay_out(const std::vector<TensorPlace>& tensors, const std::map<std::string, std::string>& metadata, const std::string& origin) {
  auto refuse = [&](const std::string& problem) -> void { throw SafetensorsError(origin + ": cannot write: " + problem); };
  if (metadata.count(kSafetensorsChecksumKey))
    refuse(std::string("the metadata key \"") + kSafetensorsChecksumKey + "\" is reserved (the data's checksum is computed on writing)");
  SafetensorsHeader header;
  header.metadata = metadata;
  std::set<std::string> names;
  for (const TensorPlace& tensor : tensors) {
    if (tensor.name.empty()) refuse("a tensor has an empty name");
    if (tensor.name == kMetadataKey) refuse("a tensor cannot be named \"__metadata__\"");
    if (!names.insert(tensor.name).second) refuse("two tensors are named \"" + tensor.name + "\"");
    const int element = safetensors_dtype_bytes(tensor.dtype);
    if (element == 0)
      refuse("tensor \"" + tensor.name + "\" has unknown dtype \"" + tensor.dtype +
             "\"; expected one of F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2");
    const auto bytes = byte_count(tensor.shape, element);
    if (!bytes || *bytes > std::numeric_limits<uint64_t>::max() - header.data_bytes)
      refuse("tensor \"" + tensor.name + "\" has an invalid shape " + shape_text(tensor.shape));
    header.tensors.push_back({tensor.name, tensor.dtype, tensor.shape, header.data_bytes, header.data_bytes + *bytes});
    header.data_bytes += *bytes;
  }
  header.index_names();
  return header;
}

// The 8-byte length and the JSON header (metadata, then the tensors in order), padded with
// spaces to a multiple of 8. The checksum's length is fixed, so a placeholder lays out the file.
// The object is written member by member: an nlohmann::ordered_json finds each new key by a
// linear search, which made a header of n tensors cost O(n²) (6400 tensors: 180 ms per header,
// twice per save). The text is the same compact JSON its dump() gave.
std::string header_bytes(const SafetensorsHeader& header, const std::string& checksum) {
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();  // a few keys: the metadata map's order, then the checksum
  for (const auto& [key, value] : header.metadata) meta[key] = value;
  meta[kSafetensorsChecksumKey] = checksum;
  std::string text = "{" + nlohmann::json(kMetadataKey).dump() + ":" + meta.dump();
  for (const TensorPlace& tensor : header.tensors) {
    const nlohmann::ordered_json entry = {{"dtype", tensor.dtype}, {"shape", tensor.shape}, {"data_offsets", {tensor.begin, tensor.end}}};
    text += "," + nlohmann::json(tensor.name).dump() + ":" + entry.dump();
  }
  text += "}";
  while (text.size() % 8 != 0) text.push_back(' ');
  std::string bytes;
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) {
    bytes.push_back(static_cast<char>(length & 0xff));
    length >>= 8;
  }
  return bytes + text;
}

// The header's length from a file's first 8 bytes, checked against the file's size.
uint64_t checked_header_length(std::string_view first_bytes, uint64_t file_bytes, const std::string& origin) {
  if (file_bytes < 8) fail(origin, "the file has " + std::to_string(file_bytes) + " bytes, fewer than the 8 of the header length");
  const uint64_t header_length = read_u64_le(first_bytes);
  const uint64_t available = file_bytes - 8;
  if (header_length > available)
    fail(origin, "the header length " + std::to_string(header_length) + " goes beyond the end of the file (" + std::to_string(available) +
                     " bytes after the length; the file is truncated or not safetensors)");
  if (header_length > kMaxHeaderBytes) fail(origin, "the header length " + std::to_string(header_length) + " is over the 100 MB limit");
  if (header_length < 2) fail(origin, "the header length " + std::to_string(header_length) + " is too small for a JSON object");
  return header_length;
}

// The names of a JSON object's members in the text's order, and the first name given twice: a SAX
// handler that builds nothing (nlohmann::json_sax; the values are skipped).
struct TopLevelNames final : nlohmann::json_sax<nlohmann::json> {
  std::vector<std::string> in_order;
  std::set<std::string> seen;
  std::optional<std::string> duplicate;  // the first name seen twice ("" is a name too)
  int depth = 0;  // open objects and arrays
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t& name) override {
    if (depth == 1) {
      if (!seen.insert(name).second && !duplicate) duplicate = name;
      in_order.push_back(name);
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

// Parses and checks the JSON header of a file of `file_bytes` bytes: every entry, and that the
// tensors tile the data buffer exactly.
SafetensorsHeader parse_header(std::string_view header_text, uint64_t file_bytes, const std::string& origin) {
  if (header_text.front() != '{') fail(origin, "the header does not start with '{' (not a JSON object)");

  // Parse into an nlohmann::json (its objects are std::maps), then list the top-level names in the
  // header's order with a SAX pass: the order breaks ties between empty tensors at one offset, and
  // a name given twice is refused (the DOM keeps only the last). Both passes are O(n log n) in the
  // tensors; an ordered_json (which finds each new key by a linear search) or the DOM parser with
  // a callback (which scans the whole parent object after each nested one) were O(n²): 6400
  // tensors took 220 ms and 670 ms to open.
  using Json = nlohmann::json;
  Json json;
  try {
    json = Json::parse(header_text.begin(), header_text.end());
  } catch (const Json::exception& error) {
    fail(origin, std::string("the header is not valid JSON: ") + error.what());
  }
  if (!json.is_object()) fail(origin, "the header is not a JSON object");
  TopLevelNames names;
  Json::sax_parse(header_text.begin(), header_text.end(), &names);
  if (names.duplicate) fail(origin, "the header names \"" + *names.duplicate + "\" twice (duplicate tensor name)");
  const std::vector<std::string>& names_in_order = names.in_order;

  SafetensorsHeader header;
  header.data_start = 8 + header_text.size();
  header.data_bytes = file_bytes - header.data_start;
  for (const std::string& name : names_in_order) {
    const Json& entry = json.at(name);
    if (name == kMetadataKey) {
      if (!entry.is_object()) fail(origin, "\"__metadata__\" must be an object of strings, found " + std::string(entry.type_name()));
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(origin, "\"__metadata__\" value of \"" + key + "\" must be a string, found " + value.dump());
        if (key == kSafetensorsChecksumKey) header.checksum = value.get<std::string>();
        else header.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    // As the writer (lay_out) refuses it: what is read must be writable again.
    if (name.empty()) fail(origin, "a tensor has an empty name");
    const std::string what = "tensor \"" + name + "\"";
    if (!entry.is_object()) fail(origin, what + " must be an object with dtype, shape and data_offsets, found " + std::string(entry.type_name()));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key)) fail(origin, what + " has no \"" + key + "\"");
    TensorPlace tensor;
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
    tensor.begin = static_cast<uint64_t>(read_nonnegative(offsets[0], origin, what + ": the begin offset"));
    tensor.end = static_cast<uint64_t>(read_nonnegative(offsets[1], origin, what + ": the end offset"));
    const std::string range = "[" + std::to_string(tensor.begin) + ", " + std::to_string(tensor.end) + "]";
    if (tensor.begin > tensor.end) fail(origin, what + " has data_offsets " + range + " that end before they begin");
    const auto expected = byte_count(tensor.shape, element);
    if (!expected) fail(origin, what + " has a shape too large to address: " + shape_text(tensor.shape));
    if (*expected != tensor.end - tensor.begin)
      fail(origin, what + " of shape " + shape_text(tensor.shape) + " and dtype " + tensor.dtype + " needs " + std::to_string(*expected) +
                       " bytes, but its data_offsets " + range + " hold " + std::to_string(tensor.end - tensor.begin));
    header.tensors.push_back(std::move(tensor));
  }

  // The tensors must tile the data buffer exactly; they are kept in the order of their data.
  std::stable_sort(header.tensors.begin(), header.tensors.end(),
                   [](const TensorPlace& a, const TensorPlace& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t cursor = 0;
  std::string previous;
  for (const TensorPlace& tensor : header.tensors) {
    const std::string range = "[" + std::to_string(tensor.begin) + ", " + std::to_string(tensor.end) + "]";
    if (tensor.end > header.data_bytes)
      fail(origin, "tensor \"" + tensor.name + "\" has data_offsets " + range + " beyond the data buffer's " + std::to_string(header.data_bytes) +
                       " bytes (the file is truncated or its offsets are out of range)");
    if (tensor.begin < cursor) fail(origin, "tensor \"" + tensor.name + "\" has data_offsets " + range + " that overlap those of \"" + previous + "\"");
    if (tensor.begin > cursor)
      fail(origin, "there is a gap of " + std::to_string(tensor.begin - cursor) + " bytes in the data buffer before tensor \"" + tensor.name +
                       "\" (offset " + std::to_string(cursor) + " to " + std::to_string(tensor.begin) + ")");
    cursor = tensor.end;
    if (tensor.end > tensor.begin) previous = tensor.name;
  }
  if (cursor != header.data_bytes)
    fail(origin, "the data buffer has " + std::to_string(header.data_bytes) + " bytes but the tensors cover " + std::to_string(cursor) + " (" +
                     std::to_string(header.data_bytes - cursor) + " unaccounted bytes at the end)");
  header.index_names();
  return header;
}

[[noreturn]] void corrupt(const std::string& origin, const std::string& actual, const std::string& expected) {
  throw SafetensorsError(origin + ": the data is corrupt: its SHA-256 is " + actual + " but the file's \"" + kSafetensorsChecksumKey + "\" says " + expected);
}

// The NamedTensors' places, after checking that each holds the bytes its shape needs.
std::vector<TensorPlace> places_of(const std::vector<NamedTensor>& tensors, const std::string& origin) {
  std::vector<TensorPlace> places;
  for (const NamedTensor& tensor : tensors) {
    const auto expected = byte_count(tensor.shape, safetensors_dtype_bytes(tensor.dtype));
    if (safetensors_dtype_bytes(tensor.dtype) != 0 && expected && *expected != tensor.bytes.size())
      throw SafetensorsError(origin + ": cannot write: tensor \"" + tensor.name + "\" of shape " + shape_text(tensor.shape) + " and dtype " + tensor.dtype +
                             " needs " + std::to_string(*expected) + " bytes, has " + std::to_string(tensor.bytes.size()));
    places.push_back({tensor.name, tensor.dtype, tensor.shape, 0, 0});
  }
  return places;
}

}  // namespace

const NamedTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& tensor : tensors)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

const TensorPlace* SafetensorsHeader::find(const std::string& name) const {
  if (by_name.size() == tensors.size()) {
    const auto found = by_name.find(name);
    return found == by_name.end() || found->second >= tensors.size() || tensors[found->second].name != name ? nullptr : &tensors[found->second];
  }
  for (const auto& tensor : tensors)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

void SafetensorsHeader::index_names() {
  by_name.clear();
  for (size_t i = 0; i < tensors.size(); ++i) by_name.emplace(tensors[i].name, i);
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
  SafetensorsHeader header = lay_out(places_of(tensors, origin), metadata, origin);
  std::string buffer;
  buffer.reserve(header.data_bytes);
  for (const auto& tensor : tensors) buffer.append(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
  return header_bytes(header, sha256_hex(buffer)) + buffer;
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& origin) {
  const uint64_t header_length = checked_header_length(bytes, bytes.size(), origin);
  SafetensorsHeader header = parse_header(std::string_view(bytes).substr(8, header_length), bytes.size(), origin);
  const std::string_view data = std::string_view(bytes).substr(header.data_start);
  if (header.checksum) {
    const std::string actual = sha256_hex(data);
    if (actual != *header.checksum) corrupt(origin, actual, *header.checksum);
  }
  SafetensorsFile result;
  result.metadata = std::move(header.metadata);
  result.checksum = std::move(header.checksum);
  for (TensorPlace& place : header.tensors) {
    const auto* first = reinterpret_cast<const unsigned char*>(data.data()) + place.begin;
    result.tensors.push_back({std::move(place.name), std::move(place.dtype), std::move(place.shape), {first, first + (place.end - place.begin)}});
  }
  return result;
}

// --- Writing in pieces --------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<TensorPlace>& tensors, const std::map<std::string, std::string>& metadata)
    : path_(path), header_(lay_out(tensors, metadata, path)) {
  header_.data_start = header_bytes(header_, kChecksumPlaceholder).size();
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
  // A unique temporary file next to the target (same file system, so the rename is atomic).
  temporary_ = path + ".tmp.XXXXXX";
  fd_ = ::mkstemp(temporary_.data());
  if (fd_ < 0) throw SafetensorsError(path + ": cannot create a temporary file next to it: " + errno_text());
  if (::fchmod(fd_, 0644) != 0) abandon("cannot set the file's permissions");
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temporary_.c_str());
  }
}

void SafetensorsWriter::abandon(const std::string& problem) {
  const int code = errno;
  const std::string why = code == 0 ? "" : ": " + std::string(std::strerror(code));
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temporary_.c_str());
    fd_ = -1;
  }
  throw SafetensorsError(path_ + ": " + problem + why);
}

void SafetensorsWriter::write(const std::string& name, uint64_t offset, const void* data, uint64_t size) {
  if (fd_ < 0) throw std::logic_error(path_ + ": write after the file was committed or abandoned");
  const auto found = index_.find(name);
  if (found == index_.end()) throw std::out_of_range(path_ + ": no tensor \"" + name + "\" was declared for this file");
  const TensorPlace& tensor = header_.tensors[found->second];
  if (offset > tensor.end - tensor.begin || size > tensor.end - tensor.begin - offset)
    throw std::out_of_range(path_ + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + size) + ") are outside tensor \"" + name +
                            "\"'s " + std::to_string(tensor.end - tensor.begin));
  if (size == 0) return;
  if (progress_ && given_ == 0) progress_({"write", 0, header_.data_bytes});
  const uint64_t begin = tensor.begin + offset, end = begin + size;
  // Refuse an overlap: the digest may already cover the first write.
  auto next = written_.upper_bound(begin);
  if ((next != written_.end() && next->first < end) || (next != written_.begin() && std::prev(next)->second > begin))
    throw std::logic_error(path_ + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + size) + ") of tensor \"" + name +
                           "\" overlap bytes written before");
  // Bytes in the data's order are hashed on a second thread while they are written.
  const bool in_order = begin == hashed_;
  const std::string_view bytes(static_cast<const char*>(data), size);
  bool written = false, hashed_beside = false;
  {
    std::unique_ptr<BackgroundDigest> beside = in_order ? digest_beside(digest_, size) : nullptr;
    if (beside) {
      beside->push(bytes);
      hashed_beside = true;
    }
    written = write_all_at(fd_, bytes.data(), size, header_.data_start + begin);
  }  // waits for the digest
  if (!written) abandon("cannot write");
  uint64_t merged_begin = begin, merged_end = end;
  if (next != written_.begin() && std::prev(next)->second == begin) {
    merged_begin = std::prev(next)->first;
    written_.erase(std::prev(next));
  }
  if (next != written_.end() && next->first == end) {
    merged_end = next->second;
    written_.erase(next);
  }
  written_[merged_begin] = merged_end;
  if (in_order) {
    if (!hashed_beside) digest_.update(bytes);
    hashed_ = end;
  }
  given_ += size;
  if (progress_) progress_({"write", given_, header_.data_bytes});
}

void SafetensorsWriter::commit() {
  if (fd_ < 0) throw std::logic_error(path_ + ": commit after the file was committed or abandoned");
  // Every byte given: one written range covering the data buffer (or none for an empty buffer).
  const uint64_t covered = written_.empty() || written_.begin()->first != 0 ? 0 : written_.begin()->second;
  if (covered != header_.data_bytes) {
    const TensorPlace* missing = nullptr;
    for (const TensorPlace& tensor : header_.tensors)
      if (tensor.end > covered) {
        missing = &tensor;
        break;
      }
    errno = 0;
    abandon("cannot write: byte " + std::to_string(covered - missing->begin) + " of tensor \"" + missing->name + "\" was never given");
  }
  // The digest of whatever did not arrive in order, read back through a fixed buffer.
  std::vector<char> buffer(static_cast<size_t>(std::min(kStreamBufferBytes, header_.data_bytes - hashed_)));
  if (progress_ && hashed_ < header_.data_bytes) progress_({"checksum", hashed_, header_.data_bytes});
  while (hashed_ < header_.data_bytes) {
    const uint64_t size = std::min<uint64_t>(buffer.size(), header_.data_bytes - hashed_);
    if (!read_all_at(fd_, buffer.data(), size, header_.data_start + hashed_)) abandon("cannot read back for the checksum");
    digest_.update(std::string_view(buffer.data(), size));
    hashed_ += size;
    if (progress_) progress_({"checksum", hashed_, header_.data_bytes});
  }
  const std::string header = header_bytes(header_, digest_.hex_digest());
  if (!write_all_at(fd_, header.data(), header.size(), 0)) abandon("cannot write");
  if (progress_) progress_({"sync", 0, 1});
  if (::fsync(fd_) != 0) abandon("cannot flush to disk");
  if (progress_) progress_({"sync", 1, 1});
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(temporary_.c_str());
    throw SafetensorsError(path_ + ": cannot write: " + why);
  }
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temporary_.c_str());
    throw SafetensorsError(path_ + ": cannot rename the temporary file into place: " + why);
  }
}

void write_safetensors_from(const std::string& path, const std::vector<TensorSource>& tensors, const std::map<std::string, std::string>& metadata,
                            const FileProgressCallback& progress) {
  std::vector<TensorPlace> places;
  for (const TensorSource& source : tensors) places.push_back(source.place);
  SafetensorsWriter writer(path, places, metadata);
  writer.set_progress(progress);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorPlace& place = writer.header().tensors[i];
    writer.write(place.name, 0, tensors[i].bytes, place.end - place.begin);
  }
  writer.commit();
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  const std::vector<TensorPlace> places = places_of(tensors, path);
  std::vector<TensorSource> sources;
  for (size_t i = 0; i < tensors.size(); ++i) sources.push_back({places[i], tensors[i].bytes.data()});
  write_safetensors_from(path, sources, metadata);
}

// --- Reading in pieces --------------------------------------------------------------------------

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw SafetensorsError(path + ": cannot open for reading: " + errno_text());
  try {
    struct stat status {};
    if (::fstat(fd_, &status) != 0) throw SafetensorsError(path + ": cannot read: " + errno_text());
    if (S_ISDIR(status.st_mode)) throw SafetensorsError(path + ": cannot read: it is a directory");
    const auto file_bytes = static_cast<uint64_t>(status.st_size);
    char first[8] = {};
    if (file_bytes >= 8 && !read_all_at(fd_, first, 8, 0)) throw SafetensorsError(path + ": cannot read: " + read_failure());
    const uint64_t header_length = checked_header_length(std::string_view(first, 8), file_bytes, path);
    std::string text(static_cast<size_t>(header_length), '\0');
    if (!read_all_at(fd_, text.data(), header_length, 8)) throw SafetensorsError(path + ": cannot read: " + read_failure());
    header_ = parse_header(text, file_bytes, path);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsReader::read(const TensorPlace& tensor, uint64_t offset, void* out, uint64_t size) {
  if (tensor.end < tensor.begin || tensor.end > header_.data_bytes || offset > tensor.end - tensor.begin || size > tensor.end - tensor.begin - offset)
    throw std::out_of_range(path_ + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + size) + ") are outside tensor \"" +
                            tensor.name + "\"");
  if (size == 0) return;
  if (progress_ && read_ == 0) progress_({"read", 0, header_.data_bytes});
  read_and_hash(tensor.begin + offset, size, static_cast<char*>(out), nullptr);
  read_ += size;
  if (progress_) progress_({"read", read_, header_.data_bytes});
}

void SafetensorsReader::read_and_hash(uint64_t begin, uint64_t size, char* out, const std::function<void(uint64_t)>& after_block) {
  const uint64_t end = begin + size;
  const bool hashing = !verified_ && begin <= hashed_ && hashed_ < end;
  const uint64_t skip = hashing ? hashed_ - begin : size;  // the piece's bytes before hashed_: already hashed
  std::unique_ptr<BackgroundDigest> beside = hashing ? digest_beside(digest_, end - hashed_) : nullptr;
  // Into `out`, a piece that no thread hashes beside is one read. Otherwise block by block, each
  // hashed on the second thread while the next is read; without `out`, through two scratch
  // buffers then (one being hashed, one being read into), else one.
  const uint64_t block_limit = out && !beside ? size : kStreamBufferBytes;
  std::vector<char> scratch[2];
  uint64_t pushed = 0, scratch_end[2] = {0, 0};  // bytes pushed through the end of each buffer's last block
  if (!out) {
    scratch[0].resize(static_cast<size_t>(std::min(block_limit, size)));
    if (beside) scratch[1].resize(scratch[0].size());
  }
  for (uint64_t at = 0, round = 0; at < size; ++round) {
    const uint64_t block = std::min(block_limit, size - at);
    const int which = beside ? static_cast<int>(round % 2) : 0;
    if (!out && beside && round >= 2) beside->hashed_through(scratch_end[which]);  // that buffer's last block is hashed
    char* const to = out ? out + at : scratch[which].data();
    if (!read_all_at(fd_, to, block, header_.data_start + begin + at)) {
      const std::string why = read_failure();
      if (beside) {
        beside.reset();
        digest_ = Sha256();  // it took bytes past hashed_: a later call starts over (verify_checksum streams the file)
        hashed_ = 0;
      }
      throw SafetensorsError(path_ + ": cannot read: " + why);
    }
    const uint64_t from = std::max(at, skip);
    if (at + block > from) {
      const std::string_view bytes(to + (from - at), at + block - from);
      if (beside) {
        beside->push(bytes);
        scratch_end[which] = pushed += bytes.size();
      } else {
        digest_.update(bytes);
        hashed_ = begin + at + block;
      }
    }
    at += block;
    if (after_block) after_block(begin + at);
  }
  if (beside) {
    beside.reset();  // waits for the digest
    hashed_ = end;
  }
}

void SafetensorsReader::verify_checksum() {
  if (!corrupt_.empty()) throw SafetensorsError(corrupt_);
  if (!header_.checksum || verified_) return;
  const uint64_t total = header_.data_bytes;
  if (progress_ && hashed_ < total) progress_({"checksum", hashed_, total});
  read_and_hash(hashed_, total - hashed_, nullptr, [&](uint64_t through) {
    if (progress_) progress_({"checksum", through, total});
  });
  hashed_ = header_.data_bytes;
  verified_ = true;
  const std::string actual = digest_.hex_digest();
  try {
    if (actual != *header_.checksum) corrupt(path_, actual, *header_.checksum);
  } catch (const SafetensorsError& error) {
    corrupt_ = error.what();
    throw;
  }
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsReader reader(path);
  SafetensorsFile result;
  for (const TensorPlace& place : reader.header().tensors) {
    NamedTensor tensor{place.name, place.dtype, place.shape, std::vector<unsigned char>(place.end - place.begin)};
    reader.read(place, 0, tensor.bytes.data(), tensor.bytes.size());
    result.tensors.push_back(std::move(tensor));
  }
  reader.verify_checksum();
  result.metadata = reader.header().metadata;
  result.checksum = reader.header().checksum;
  return result;
}

}  // namespace orthojit::runtime
