// .npy reading and writing: round trips, and a clear refusal of everything that is not an f32/f64
// C-order 2-D or 3-D array. (tests/npy_interop_test.py checks files written by NumPy itself.)
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/npy_file.h"

namespace orthojit {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "orthojit_" + name; }

void write_raw(const std::string& path, const std::string& header_dict, size_t data_bytes) {
  std::string header = header_dict;
  while ((10 + header.size() + 1) % 64) header.push_back(' ');
  header.push_back('\n');
  std::ofstream file(path, std::ios::binary);
  file.write("\x93NUMPY\x01\x00", 8);
  const char length[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  file.write(length, 2);
  file << header << std::string(data_bytes, '\0');
}

std::string read_error(const std::string& path) {
  try {
    runtime::read_npy(path);
  } catch (const runtime::NpyError& error) {
    return error.what();
  }
  return "";
}

TEST(NpyFile, RoundTripsFloat32AndFloat64) {
  for (bool f64 : {false, true}) {
    for (std::vector<int64_t> shape : {std::vector<int64_t>{3, 5}, {2, 3, 4}}) {
      runtime::NpyArray array;
      array.shape = shape;
      array.is_f64 = f64;
      int64_t count = 1;
      for (auto d : shape) count *= d;
      for (int64_t i = 0; i < count; ++i) array.values.push_back(f64 ? 0.1 * static_cast<double>(i) - 1.0 / 3.0 : static_cast<float>(i) * 0.25f);
      const std::string path = temp_path("roundtrip.npy");
      runtime::write_npy(path, array);
      const runtime::NpyArray back = runtime::read_npy(path);
      EXPECT_EQ(back.shape, shape);
      EXPECT_EQ(back.is_f64, f64);
      EXPECT_EQ(back.values, array.values);
      std::ifstream file(path, std::ios::binary | std::ios::ate);
      EXPECT_EQ(static_cast<int64_t>(file.tellg()) % 64, (count * (f64 ? 8 : 4)) % 64);  // header padded to 64 bytes
    }
  }
}

TEST(NpyFile, RefusesWhatItCannotRead) {
  const std::string path = temp_path("bad.npy");
  write_raw(path, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", 16);
  EXPECT_NE(read_error(path).find("element type '<i4' is not supported; expected little-endian float32"), std::string::npos);
  write_raw(path, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", 16);
  EXPECT_NE(read_error(path).find("'>f4' is not supported"), std::string::npos);
  write_raw(path, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16);
  EXPECT_NE(read_error(path).find("Fortran order"), std::string::npos);
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 16);
  EXPECT_NE(read_error(path).find("has 1 dimensions (shape (4,)); expected 2"), std::string::npos);
  write_raw(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2, 2, 2), }", 128);
  EXPECT_NE(read_error(path).find("has 4 dimensions"), std::string::npos);
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 20);
  EXPECT_NE(read_error(path).find("truncated data: expected 48 bytes"), std::string::npos);
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4), }", 0);
  EXPECT_NE(read_error(path).find("is empty"), std::string::npos);
  {
    std::ofstream file(path, std::ios::binary);
    file << "not an npy file at all";
  }
  EXPECT_NE(read_error(path).find("not a .npy file"), std::string::npos);
  EXPECT_NE(read_error(temp_path("does_not_exist.npy")).find("cannot open"), std::string::npos);
  std::remove(path.c_str());
}

TEST(NpyFile, FailedWriteLeavesTheTargetUntouched) {
  runtime::NpyArray array{{2, 2}, false, {1, 2, 3, 4}};
  EXPECT_THROW(runtime::write_npy("/nonexistent-directory/x.npy", array), runtime::NpyError);
  const std::string path = temp_path("keep.npy");
  runtime::write_npy(path, array);
  runtime::NpyArray wrong{{3, 3}, false, {1, 2}};  // shape and values disagree: refused before writing
  EXPECT_THROW(runtime::write_npy(path, wrong), runtime::NpyError);
  EXPECT_EQ(runtime::read_npy(path).values, array.values);
}

}  // namespace
}  // namespace orthojit
