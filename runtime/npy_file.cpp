// .npy I/O. Format: "\x93NUMPY", version (1.0, 2.0 or 3.0), header length, a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (m, n), } padded with spaces, then the data.
#include "runtime/npy_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

namespace orthojit::runtime {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

// What the header dict says: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
struct NpyHeader {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
  std::string shape_text;  // as written, for messages
};

// Reads the header's Python dict literal as NumPy writes it: string keys in ' or " quotes, and
// values that are a quoted string, True, False, or a tuple of non-negative integers. A hand
// parser, not a regular expression: std::regex backtracks recursively (a long header overflowed
// the stack) and is slow; this reads each byte once and says where it stopped making sense.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader header;
    skip_spaces();
    expect('{', "'{' opening the header dict");
    for (;;) {
      skip_spaces();
      if (peek() == '}') break;
      const std::string key = quoted();
      skip_spaces();
      expect(':', "':' after the key '" + key + "'");
      skip_spaces();
      if (key == "descr") header.descr = quoted();
      else if (key == "fortran_order") header.fortran_order = boolean();
      else if (key == "shape") header.shape = tuple(header.shape_text);
      else fail("an unknown key '" + key + "' (a .npy header has descr, fortran_order and shape)");
      skip_spaces();
      if (peek() == ',') {
        ++position_;
        continue;
      }
      if (peek() != '}') fail("',' or '}' after the value of '" + key + "'");
    }
    ++position_;  // '}'
    skip_spaces();
    if (position_ != text_.size()) fail("the end of the header after the dict");
    return header;
  }

 private:
  char peek() const { return position_ < text_.size() ? text_[position_] : '\0'; }
  void skip_spaces() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\t' || text_[position_] == '\n' || text_[position_] == '\r'))
      ++position_;
  }
  [[noreturn]] void fail(const std::string& expected) const {
    const std::string found = position_ < text_.size() ? "'" + std::string(1, text_[position_]) + "'" : "the end of the header";
    throw NpyError(path_ + ": malformed .npy header at byte " + std::to_string(position_) + ": expected " + expected + ", found " + found);
  }
  void expect(char wanted, const std::string& what) {
    if (peek() != wanted) fail(what);
    ++position_;
  }
  std::string quoted() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("a quoted key or string");
    const size_t end = text_.find(quote, position_ + 1);
    if (end == std::string_view::npos) fail(std::string("the closing ") + quote);
    std::string value(text_.substr(position_ + 1, end - position_ - 1));
    position_ = end + 1;
    return value;
  }
  bool boolean() {
    for (const auto& [word, value] : {std::pair<std::string_view, bool>{"True", true}, {"False", false}})
      if (text_.substr(position_, word.size()) == word) {
        position_ += word.size();
        return value;
      }
    fail("True or False");
  }
  std::vector<int64_t> tuple(std::string& written) {
    const size_t start = position_;
    expect('(', "'(' opening the shape tuple");
    std::vector<int64_t> dimensions;
    for (;;) {
      skip_spaces();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("a non-negative integer dimension or ')' in the shape");
      int64_t value = 0;
      while (peek() >= '0' && peek() <= '9') {
        const int digit = peek() - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) fail("a dimension below 2^63 in the shape");
        value = value * 10 + digit;
        ++position_;
      }
      dimensions.push_back(value);
      skip_spaces();
      if (peek() == ',') ++position_;
      else if (peek() != ')') fail("',' or ')' after a dimension of the shape");
    }
    ++position_;  // ')'
    written = std::string(text_.substr(start + 1, position_ - start - 2));
    return dimensions;
  }

  std::string_view text_;
  const std::string& path_;
  size_t position_ = 0;
};

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw NpyError(path + ": cannot open for reading");
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) throw NpyError(path + ": cannot read");
  return parse_npy(contents.view(), path);
}

NpyArray parse_npy(std::string_view bytes, const std::string& path) {
  // Reads `size` bytes at the cursor, or fewer at the end of the file (the callers say what was
  // truncated).
  size_t cursor = 0;
  auto take = [&](size_t size) {
    const std::string_view taken = bytes.substr(std::min(cursor, bytes.size()), size);
    cursor += taken.size();
    return taken;
  };
  const std::string_view magic = take(6);
  if (magic.size() != 6 || std::memcmp(magic.data(), kMagic, 6) != 0) throw NpyError(path + ": not a .npy file (missing the \\x93NUMPY magic)");
  const std::string_view version = take(2);
  if (version.size() != 2) throw NpyError(path + ": truncated or corrupt .npy header");
  const auto byte = [](std::string_view text, size_t i) { return uint32_t{static_cast<unsigned char>(text[i])}; };
  uint32_t header_length = 0;
  if (byte(version, 0) == 1) {
    const std::string_view length = take(2);
    if (length.size() != 2) throw NpyError(path + ": truncated or corrupt .npy header");
    header_length = byte(length, 0) | (byte(length, 1) << 8);
  } else if (byte(version, 0) == 2 || byte(version, 0) == 3) {
    const std::string_view length = take(4);
    if (length.size() != 4) throw NpyError(path + ": truncated or corrupt .npy header");
    header_length = byte(length, 0) | (byte(length, 1) << 8) | (byte(length, 2) << 16) | (byte(length, 3) << 24);
  } else {
    throw NpyError(path + ": unsupported .npy version " + std::to_string(byte(version, 0)) + "." + std::to_string(byte(version, 1)) +
                   " (1.0, 2.0 and 3.0 are read)");
  }
  if (header_length > (1u << 20)) throw NpyError(path + ": truncated or corrupt .npy header");
  const std::string header(take(header_length));
  if (header.size() != header_length) throw NpyError(path + ": truncated .npy header");

  const NpyHeader parsed = HeaderParser(header, path).parse();
  for (const auto& [present, key] : {std::pair<bool, const char*>{parsed.descr.has_value(), "descr"},
                                     {parsed.fortran_order.has_value(), "fortran_order"},
                                     {parsed.shape.has_value(), "shape"}})
    if (!present) throw NpyError(path + ": the .npy header has no '" + key + "' entry");
  NpyArray array;
  const std::string& descr = *parsed.descr;
  if (descr == "<f4" || descr == "=f4") array.is_f64 = false;
  else if (descr == "<f8" || descr == "=f8") array.is_f64 = true;
  else
    throw NpyError(path + ": element type '" + descr + "' is not supported; expected little-endian float32 ('<f4') or float64 ('<f8')" +
                   " (convert with x.astype(np.float32))");
  if (*parsed.fortran_order)
    throw NpyError(path + ": the array is in Fortran order; expected C order (save np.ascontiguousarray(x))");
  const std::string& shape_text = parsed.shape_text;
  array.shape = *parsed.shape;
  if (array.shape.size() != 2 && array.shape.size() != 3)
    throw NpyError(path + ": the array has " + std::to_string(array.shape.size()) + " dimensions (shape (" + shape_text +
                   ")); expected 2 (one m x n matrix) or 3 (a batch: batch x m x n)");
  for (int64_t d : array.shape)
    if (d == 0) throw NpyError(path + ": the array is empty (shape (" + shape_text + ")); every dimension must be at least 1");
  // The element count, checked against the bytes left before anything is allocated: a corrupt
  // shape must not overflow or ask for more memory than the file could fill.
  const size_t element_size = array.is_f64 ? 8 : 4;
  const size_t left = bytes.size() - std::min(cursor, bytes.size());
  size_t count = 1;
  bool overflows = false;
  for (int64_t d : array.shape) {
    if (static_cast<uint64_t>(d) > std::numeric_limits<size_t>::max() / element_size / count) {
      overflows = true;
      break;
    }
    count *= static_cast<size_t>(d);
  }
  if (overflows || count * element_size > left)
    throw NpyError(path + ": truncated data: expected " + (overflows ? std::string("more than 2^64") : std::to_string(count * element_size)) +
                   " bytes for shape (" + shape_text + "), the file has " + std::to_string(left));

  const size_t data_bytes = count * element_size;
  const std::string_view raw = take(data_bytes);
  if (raw.size() != data_bytes)
    throw NpyError(path + ": truncated data: expected " + std::to_string(data_bytes) + " bytes for shape (" + shape_text + "), found " +
                   std::to_string(raw.size()));
  array.values.resize(count);
  for (size_t i = 0; i < array.values.size(); ++i) {
    if (array.is_f64) {
      double value;
      std::memcpy(&value, raw.data() + i * 8, 8);
      array.values[i] = value;
    } else {
      float value;
      std::memcpy(&value, raw.data() + i * 4, 4);
      array.values[i] = value;
    }
  }
  return array;
}

void write_npy(const std::string& path, const NpyArray& array) {
  int64_t count = 1;
  std::string shape = "(";
  for (size_t i = 0; i < array.shape.size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(array.shape[i]);
    count *= array.shape[i];
  }
  shape += array.shape.size() == 1 ? ",)" : ")";
  if (count != static_cast<int64_t>(array.values.size()))
    throw NpyError(path + ": internal: shape " + shape + " does not match " + std::to_string(array.values.size()) + " values");
  std::string header = std::string("{'descr': '") + (array.is_f64 ? "<f8" : "<f4") + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t unpadded = 10 + header.size() + 1;  // magic + version + length, then the header and '\n'
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');

  auto write_to = [&](std::ofstream& file) {
    file.write(kMagic, 6);
    const char version[2] = {1, 0};
    file.write(version, 2);
    const uint16_t length = static_cast<uint16_t>(header.size());
    const char length_bytes[2] = {static_cast<char>(length & 0xff), static_cast<char>(length >> 8)};
    file.write(length_bytes, 2);
    file.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (double value : array.values) {
      if (array.is_f64) {
        file.write(reinterpret_cast<const char*>(&value), 8);
      } else {
        const float narrow = static_cast<float>(value);
        file.write(reinterpret_cast<const char*>(&narrow), 4);
      }
    }
    return static_cast<bool>(file.flush());
  };
  // A regular file is replaced whole (a temporary renamed over it: a reader never sees half a
  // file, and a failed write leaves the old one). A symbolic link keeps pointing where it did: the
  // file it names is replaced. A device, FIFO or socket (/dev/null, /dev/stdout) is written in
  // place: renaming over it replaced the device node with a regular file.
  namespace fs = std::filesystem;
  std::error_code error;
  fs::path target = path;
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(target, error)); ++hops) {  // a chain, or one to a file not yet made
    const fs::path next = fs::read_symlink(target, error);
    if (error) break;
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  const fs::file_status status = fs::status(target, error);
  if (fs::is_directory(status)) throw NpyError(path + ": is a directory; give the output a file name, e.g. " + (fs::path(path) / "out.npy").string());
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    std::ofstream file(path, std::ios::binary);
    if (!file) throw NpyError(path + ": cannot open for writing: " + std::strerror(errno));
    if (!write_to(file)) throw NpyError(path + ": write failed");
    return;
  }
  const std::string temporary = target.string() + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (!file) throw NpyError(path + ": cannot open " + temporary + " for writing: " + std::strerror(errno));
    if (!write_to(file)) {
      file.close();
      std::remove(temporary.c_str());
      throw NpyError(path + ": write failed");
    }
  }
  if (std::rename(temporary.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temporary.c_str());
    throw NpyError(path + ": cannot rename the temporary file into place: " + why);
  }
}

}  // namespace orthojit::runtime
