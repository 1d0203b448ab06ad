// .npy I/O. Format: "\x93NUMPY", version (1.0, 2.0 or 3.0), header length, a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (m, n), } padded with spaces, then the data.
#include "runtime/npy_file.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

namespace orthojit::runtime {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  const std::regex pattern("['\"]" + key + "['\"]\\s*:\\s*('[^']*'|\"[^\"]*\"|\\([^)]*\\)|True|False)");
  std::smatch match;
  if (!std::regex_search(header, match, pattern)) throw NpyError(path + ": the .npy header has no '" + key + "' entry");
  return match[1].str();
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw NpyError(path + ": cannot open for reading");
  char magic[6] = {};
  file.read(magic, 6);
  if (!file || std::memcmp(magic, kMagic, 6) != 0) throw NpyError(path + ": not a .npy file (missing the \\x93NUMPY magic)");
  unsigned char version[2] = {};
  file.read(reinterpret_cast<char*>(version), 2);
  uint32_t header_length = 0;
  if (version[0] == 1) {
    unsigned char bytes[2] = {};
    file.read(reinterpret_cast<char*>(bytes), 2);
    header_length = bytes[0] | (uint32_t{bytes[1]} << 8);
  } else if (version[0] == 2 || version[0] == 3) {
    unsigned char bytes[4] = {};
    file.read(reinterpret_cast<char*>(bytes), 4);
    header_length = bytes[0] | (uint32_t{bytes[1]} << 8) | (uint32_t{bytes[2]} << 16) | (uint32_t{bytes[3]} << 24);
  } else {
    throw NpyError(path + ": unsupported .npy version " + std::to_string(version[0]) + "." + std::to_string(version[1]) + " (1.0, 2.0 and 3.0 are read)");
  }
  if (!file || header_length > (1u << 20)) throw NpyError(path + ": truncated or corrupt .npy header");
  std::string header(header_length, '\0');
  file.read(header.data(), header_length);
  if (!file) throw NpyError(path + ": truncated .npy header");

  NpyArray array;
  std::string descr = dict_value(header, "descr", path);
  descr = descr.substr(1, descr.size() - 2);
  if (descr == "<f4" || descr == "=f4") array.is_f64 = false;
  else if (descr == "<f8" || descr == "=f8") array.is_f64 = true;
  else
    throw NpyError(path + ": element type '" + descr + "' is not supported; expected little-endian float32 ('<f4') or float64 ('<f8')" +
                   " (convert with x.astype(np.float32))");
  if (dict_value(header, "fortran_order", path) != "False")
    throw NpyError(path + ": the array is in Fortran order; expected C order (save np.ascontiguousarray(x))");
  std::string shape_text = dict_value(header, "shape", path);
  shape_text = shape_text.substr(1, shape_text.size() - 2);
  std::stringstream dims(shape_text);
  std::string dim;
  int64_t count = 1;
  while (std::getline(dims, dim, ',')) {
    const auto first = dim.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    const int64_t value = std::stoll(dim.substr(first));
    if (value < 0) throw NpyError(path + ": negative dimension in shape (" + shape_text + ")");
    array.shape.push_back(value);
    count *= value;
  }
  if (array.shape.size() != 2 && array.shape.size() != 3)
    throw NpyError(path + ": the array has " + std::to_string(array.shape.size()) + " dimensions (shape (" + shape_text +
                   ")); expected 2 (one m x n matrix) or 3 (a batch: batch x m x n)");
  for (int64_t d : array.shape)
    if (d == 0) throw NpyError(path + ": the array is empty (shape (" + shape_text + ")); every dimension must be at least 1");

  const size_t element_size = array.is_f64 ? 8 : 4;
  std::vector<char> raw(static_cast<size_t>(count) * element_size);
  file.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (static_cast<size_t>(file.gcount()) != raw.size())
    throw NpyError(path + ": truncated data: expected " + std::to_string(raw.size()) + " bytes for shape (" + shape_text + "), found " +
                   std::to_string(file.gcount()));
  array.values.resize(static_cast<size_t>(count));
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

  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (!file) throw NpyError(path + ": cannot open for writing");
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
    if (!file.flush()) {
      std::remove(temporary.c_str());
      throw NpyError(path + ": write failed");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw NpyError(path + ": cannot rename the temporary file into place");
  }
}

}  // namespace orthojit::runtime
