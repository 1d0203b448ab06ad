// The safetensors format: bit-exact round trips, files built by hand from the specification (so
// we read what other tools write, not only what we write), the checksum in "__metadata__", a
// specific error for every structural problem, and atomic writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/muon/safetensors_file.h"
#include "support/sha256.h"

namespace orthojit {
namespace {

using runtime::NamedTensor;
using runtime::SafetensorsError;

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "orthojit_st_" + name; }

std::vector<unsigned char> as_bytes(const void* data, size_t size) {
  const auto* first = static_cast<const unsigned char*>(data);
  return {first, first + size};
}

NamedTensor f32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
  return {name, "F32", std::move(shape), as_bytes(values.data(), values.size() * sizeof(float))};
}

// A file as the specification describes it: the 8-byte little-endian length, the header as
// given (padded with spaces to a multiple of 8 when `pad`), the data.
std::string build_file(const std::string& header, const std::string& data, bool pad = true) {
  std::string text = header;
  while (pad && text.size() % 8 != 0) text.push_back(' ');
  std::string file;
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) {
    file.push_back(static_cast<char>(length & 0xff));
    length >>= 8;
  }
  return file + text + data;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string read_error(const std::string& path) {
  try {
    runtime::read_safetensors(path);
  } catch (const SafetensorsError& error) {
    return error.what();
  }
  return "(no error)";
}

std::string error_of(const std::string& name, const std::string& header, const std::string& data) {
  const std::string path = temp_path(name);
  write_file(path, build_file(header, data));
  return read_error(path);
}

// Every tensor cut into pieces of 1 to `largest` bytes, in the data's order.
struct Piece {
  size_t tensor;
  uint64_t offset, size;
};
std::vector<Piece> pieces_of(const std::vector<NamedTensor>& tensors, uint64_t largest, std::mt19937& random) {
  std::vector<Piece> pieces;
  for (size_t t = 0; t < tensors.size(); ++t)
    for (uint64_t at = 0; at < tensors[t].bytes.size();) {
      const uint64_t size = std::min<uint64_t>(tensors[t].bytes.size() - at, 1 + random() % largest);
      pieces.push_back({t, at, size});
      at += size;
    }
  return pieces;
}

std::string floats(const std::vector<float>& values) { return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)}; }

TEST(SafetensorsFile, RoundTripsBitExactWithEmptyTensorsAndMetadata) {
  const std::vector<float> weights = {1.0f, -0.0f, 3.5e-41f /* subnormal */, std::numeric_limits<float>::infinity(), std::nanf("0x123"), 7.25f};
  const int64_t step = 123456789012345;
  const std::vector<uint16_t> halves = {0x3c00, 0x7e01, 0x8001};
  std::vector<NamedTensor> tensors = {
      f32_tensor("layers.0.weight.momentum_buffer", {2, 3}, weights),
      {"layers.0.bias.step", "I64", {}, as_bytes(&step, sizeof step)},
      {"empty_bf16", "BF16", {0}, {}},
      {"empty_2d", "F16", {4, 0}, {}},
      {"halves", "F16", {3}, as_bytes(halves.data(), 6)},
      {"brains", "BF16", {1, 3}, as_bytes(halves.data(), 6)},
  };
  const std::map<std::string, std::string> metadata = {{"orthojit.format", "hybrid-optimizer-state/1"}, {"note", "ünïcode \"quoted\""}, {"empty", ""}};
  const std::string path = temp_path("roundtrip.safetensors");
  runtime::write_safetensors(path, tensors, metadata);

  const runtime::SafetensorsFile file = runtime::read_safetensors(path);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {  // in the written order (the order of the data)
    EXPECT_EQ(file.tensors[i].name, tensors[i].name);
    EXPECT_EQ(file.tensors[i].dtype, tensors[i].dtype);
    EXPECT_EQ(file.tensors[i].shape, tensors[i].shape);
    EXPECT_EQ(file.tensors[i].bytes, tensors[i].bytes) << tensors[i].name;
  }
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_TRUE(file.checksum.has_value());
  EXPECT_EQ(file.checksum->size(), 64u);
  ASSERT_NE(file.find("halves"), nullptr);
  EXPECT_EQ(file.find("nope"), nullptr);

  // The layout of the specification: the header length, a header padded to a multiple of 8.
  const std::string bytes = read_file(path);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(header_length % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ(bytes.size(), 8 + header_length + 6 * 4 + 8 + 6 + 6);
  // Nothing but the file itself in the directory (the temporary file was renamed).
  for (const auto& entry : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_EQ(entry.path().filename().string().find("orthojit_st_roundtrip.safetensors.tmp"), std::string::npos) << entry.path();

  // No tensors at all is a valid file too.
  runtime::write_safetensors(path, {}, {});
  EXPECT_TRUE(runtime::read_safetensors(path).tensors.empty());
}

TEST(SafetensorsFile, ReadsAFileBuiltByHandFromTheSpecification) {
  // Header entries in any order (here not the data's), no checksum (another tool's file),
  // "__metadata__" first as the reference writer puts it.
  const std::vector<float> weight = {1.5f, -2.0f, 0.25f, 8.0f};
  const int64_t bias = -7;
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("model.bias":{"dtype":"I64","shape":[1],"data_offsets":[16,24]},)"
                             R"("model.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  const std::string data = floats(weight) + std::string(reinterpret_cast<const char*>(&bias), sizeof bias);
  for (bool pad : {true, false}) {  // unpadded headers (older writers) are read too
    const std::string path = temp_path("handbuilt.safetensors");
    write_file(path, build_file(header, data, pad));
    const runtime::SafetensorsFile file = runtime::read_safetensors(path);
    ASSERT_EQ(file.tensors.size(), 2u);
    EXPECT_EQ(file.tensors[0].name, "model.weight");  // ordered by data offset
    EXPECT_EQ(file.tensors[0].dtype, "F32");
    EXPECT_EQ(file.tensors[0].shape, (std::vector<int64_t>{2, 2}));
    std::vector<float> read(4);
    std::memcpy(read.data(), file.tensors[0].bytes.data(), 16);
    EXPECT_EQ(read, weight);
    EXPECT_EQ(file.tensors[1].name, "model.bias");
    int64_t read_bias = 0;
    std::memcpy(&read_bias, file.tensors[1].bytes.data(), 8);
    EXPECT_EQ(read_bias, -7);
    EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
    EXPECT_FALSE(file.checksum.has_value());
  }
}

// Empty tensors share an offset with their neighbours; the header's order decides theirs, not the
// names' (the parser holds the header in a map sorted by name, and lists the order separately).
TEST(SafetensorsFile, EmptyTensorsAtOneOffsetKeepTheHeadersOrder) {
  const std::vector<float> weight = {1.0f, 2.0f};
  const std::string header = R"({"z.empty":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                             R"("b.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("m.empty":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},)"
                             R"("a.empty":{"dtype":"I64","shape":[0],"data_offsets":[8,8]}})";
  const std::string path = temp_path("empty_order.safetensors");
  write_file(path, build_file(header, floats(weight)));
  const runtime::SafetensorsFile file = runtime::read_safetensors(path);
  std::vector<std::string> names;
  for (const NamedTensor& tensor : file.tensors) names.push_back(tensor.name);
  EXPECT_EQ(names, (std::vector<std::string>{"z.empty", "m.empty", "b.weight", "a.empty"}));
}

// The writer's header, read back by a JSON parser that keeps the order (an independent reader of
// the text): compact JSON (what nlohmann's dump() writes), "__metadata__" first with the checksum
// last in it, then the tensors in the data's order; names that need escaping stay intact.
TEST(SafetensorsFile, TheWrittenHeaderIsCompactJsonInTheDatasOrder) {
  const std::string path = temp_path("header_text.safetensors");
  const std::vector<NamedTensor> tensors = {f32_tensor("z \"quoted\"\\name", {1}, {1.0f}), f32_tensor("a.weight", {2}, {2.0f, 3.0f}),
                                            f32_tensor("m.\xc3\xa9t\xc3\xa9", {0}, {})};
  runtime::write_safetensors(path, tensors, {{"b", "2"}, {"a", "1"}});
  const std::string bytes = read_file(path);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  std::string text = bytes.substr(8, length);
  while (!text.empty() && text.back() == ' ') text.pop_back();
  const nlohmann::ordered_json json = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(json.dump(), text);
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "z \"quoted\"\\name", "a.weight", "m.\xc3\xa9t\xc3\xa9"}));
  std::vector<std::string> meta_keys;
  for (const auto& [key, value] : json.at("__metadata__").items()) meta_keys.push_back(key);
  EXPECT_EQ(meta_keys, (std::vector<std::string>{"a", "b", runtime::kSafetensorsChecksumKey}));
  EXPECT_EQ(json.at("a.weight").dump(), R"({"dtype":"F32","shape":[2],"data_offsets":[4,12]})");
  EXPECT_EQ(runtime::read_safetensors(path).tensors.size(), 3u);
}

TEST(SafetensorsFile, AFlippedDataByteFailsTheChecksum) {
  const std::string path = temp_path("flipped.safetensors");
  runtime::write_safetensors(path, {f32_tensor("w", {2, 2}, {1, 2, 3, 4})}, {});
  std::string bytes = read_file(path);
  bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x10);
  write_file(path, bytes);
  const std::string error = read_error(path);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("the data is corrupt: its SHA-256 is"), std::string::npos) << error;
  EXPECT_NE(error.find("orthojit.sha256"), std::string::npos) << error;
}

TEST(SafetensorsFile, NamesEachStructuralProblem) {
  const std::string path = temp_path("truncated.safetensors");
  runtime::write_safetensors(path, {f32_tensor("w", {2, 2}, {1, 2, 3, 4})}, {});
  const std::string good = read_file(path);

  // Truncated: the data ends early; then so early that the header is cut; then not even 8 bytes.
  write_file(path, good.substr(0, good.size() - 5));
  std::string error = read_error(path);
  EXPECT_NE(error.find(path + ": not a valid safetensors file: tensor \"w\" has data_offsets [0, 16] beyond the data buffer's 11 bytes"), std::string::npos)
      << error;
  write_file(path, good.substr(0, 20));
  EXPECT_NE(read_error(path).find("goes beyond the end of the file"), std::string::npos) << read_error(path);
  write_file(path, good.substr(0, 5));
  EXPECT_NE(read_error(path).find("the file has 5 bytes, fewer than the 8 of the header length"), std::string::npos) << read_error(path);

  // A header length larger than the file.
  std::string bad_length = good;
  bad_length[5] = '\x01';  // 2^40 + ...
  write_file(path, bad_length);
  error = read_error(path);
  EXPECT_NE(error.find("the header length 1099511627"), std::string::npos) << error;
  EXPECT_NE(error.find("goes beyond the end of the file"), std::string::npos) << error;

  const std::string data = floats({1, 2, 3, 4});
  error = error_of("overlap.safetensors", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   data);
  EXPECT_NE(error.find("tensor \"b\" has data_offsets [4, 12] that overlap those of \"a\""), std::string::npos) << error;

  error = error_of("gap.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data);
  EXPECT_NE(error.find("there is a gap of 4 bytes in the data buffer before tensor \"b\""), std::string::npos) << error;

  error = error_of("tail.safetensors", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", data);
  EXPECT_NE(error.find("the data buffer has 16 bytes but the tensors cover 12"), std::string::npos) << error;

  error = error_of("dtype.safetensors", R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", data);
  EXPECT_NE(error.find("tensor \"a\" has unknown dtype \"Q4\"; expected one of F64, F32, F16, BF16, I64"), std::string::npos) << error;

  error = error_of("count.safetensors", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data);
  EXPECT_NE(error.find("tensor \"a\" of shape [3] and dtype F32 needs 12 bytes, but its data_offsets [0, 16] hold 16"), std::string::npos) << error;

  error = error_of("duplicate.safetensors",
                   R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data);
  EXPECT_NE(error.find("the header names \"a\" twice"), std::string::npos) << error;

  // The writer refuses an empty name, so the reader does (found by fuzz_safetensors: a file
  // read that could not be written back); named twice, it is a duplicate.
  error = error_of("empty-name.safetensors", R"({"":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data);
  EXPECT_NE(error.find("a tensor has an empty name"), std::string::npos) << error;
  error = error_of("empty-twice.safetensors",
                   R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data);
  EXPECT_NE(error.find("the header names \"\" twice"), std::string::npos) << error;

  error = error_of("json.safetensors", R"({"a":{"dtype":"F32",)", data);
  EXPECT_NE(error.find("the header is not valid JSON"), std::string::npos) << error;

  error = error_of("negative.safetensors", R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data);
  EXPECT_NE(error.find("a dimension must be a non-negative integer, found -4"), std::string::npos) << error;

  error = error_of("metadata.safetensors", R"({"__metadata__":{"k":3},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data);
  EXPECT_NE(error.find("\"__metadata__\" value of \"k\" must be a string"), std::string::npos) << error;

  error = error_of("missing.safetensors", R"({"a":{"dtype":"F32","shape":[4]}})", data);
  EXPECT_NE(error.find("tensor \"a\" has no \"data_offsets\""), std::string::npos) << error;

  EXPECT_NE(read_error(temp_path("does-not-exist.safetensors")).find("cannot open for reading"), std::string::npos);
}

TEST(SafetensorsFile, RefusesInvalidTensorsOnWriting) {
  const std::string path = temp_path("invalid-write.safetensors");
  auto write_error = [&](const std::vector<NamedTensor>& tensors, const std::map<std::string, std::string>& metadata = {}) -> std::string {
    try {
      runtime::write_safetensors(path, tensors, metadata);
    } catch (const SafetensorsError& error) {
      return error.what();
    }
    return "(no error)";
  };
  std::remove(path.c_str());
  EXPECT_NE(write_error({{"a", "F32", {3}, std::vector<unsigned char>(8)}}).find("needs 12 bytes, has 8"), std::string::npos);
  EXPECT_NE(write_error({{"a", "F24", {1}, std::vector<unsigned char>(3)}}).find("unknown dtype \"F24\""), std::string::npos);
  EXPECT_NE(write_error({f32_tensor("a", {1}, {1}), f32_tensor("a", {1}, {2})}).find("two tensors are named \"a\""), std::string::npos);
  EXPECT_NE(write_error({f32_tensor("__metadata__", {1}, {1})}).find("cannot be named"), std::string::npos);
  EXPECT_NE(write_error({}, {{"orthojit.sha256", "x"}}).find("is reserved"), std::string::npos);
  EXPECT_FALSE(fs::exists(path));
}

TEST(SafetensorsFile, AFailedWriteLeavesNothingBehind) {
  const std::vector<NamedTensor> tensors = {f32_tensor("w", {2}, {1, 2})};
  // A directory that does not exist.
  const std::string missing = temp_path("no-such-dir") + "/state.safetensors";
  EXPECT_THROW(runtime::write_safetensors(missing, tensors, {}), SafetensorsError);
  EXPECT_FALSE(fs::exists(fs::path(missing).parent_path()));

  // The rename fails (the target is a non-empty directory): the temporary file is removed.
  const fs::path dir = temp_path("atomic-dir");
  fs::remove_all(dir);
  fs::create_directories(dir / "target.safetensors" / "occupied");
  try {
    runtime::write_safetensors((dir / "target.safetensors").string(), tensors, {});
    ADD_FAILURE() << "writing over a directory succeeded";
  } catch (const SafetensorsError& error) {
    EXPECT_NE(std::string(error.what()).find("cannot rename the temporary file into place"), std::string::npos) << error.what();
  }
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir)) left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"target.safetensors"});

  // An existing file survives a failed write untouched.
  const std::string existing = (dir / "existing.safetensors").string();
  runtime::write_safetensors(existing, tensors, {{"version", "1"}});
  const std::string before = read_file(existing);
  EXPECT_THROW(runtime::write_safetensors(existing, {{"bad", "F32", {5}, {}}}, {}), SafetensorsError);
  EXPECT_EQ(read_file(existing), before);

  // A directory without write permission (meaningless for root, which may write anywhere).
  if (::geteuid() != 0) {
    const fs::path locked = dir / "locked";
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    const std::string target = (locked / "state.safetensors").string();
    try {
      runtime::write_safetensors(target, tensors, {});
      ADD_FAILURE() << "writing into a read-only directory succeeded";
    } catch (const SafetensorsError& error) {
      EXPECT_NE(std::string(error.what()).find(target + ": cannot create a temporary file next to it"), std::string::npos) << error.what();
    }
    EXPECT_TRUE(fs::is_empty(locked));
    fs::permissions(locked, fs::perms::owner_all);
  }
  fs::remove_all(dir);
}

// Tensors of random sizes and dtypes, given to the writer in pieces of random sizes in a random
// order: the file is byte for byte the one write_safetensors makes of the whole tensors (so the
// checksum computed from pieces out of order is right), and the reader gives back every piece.
TEST(SafetensorsFile, PiecesInAnyOrderMakeTheSameFile) {
  std::mt19937 random(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<NamedTensor> tensors;
    const int count = 1 + static_cast<int>(random() % 6);
    for (int t = 0; t < count; ++t) {
      const char* dtype = random() % 2 ? "F32" : "I64";
      const int64_t rows = random() % 4, columns = random() % 5000;
      NamedTensor tensor{"t" + std::to_string(t), dtype, {rows, columns}, std::vector<unsigned char>(static_cast<size_t>(rows * columns) * (dtype[0] == 'F' ? 4 : 8))};
      for (unsigned char& byte : tensor.bytes) byte = static_cast<unsigned char>(random());
      tensors.push_back(std::move(tensor));
    }
    const std::map<std::string, std::string> metadata = {{"trial", std::to_string(trial)}};
    const std::string whole = temp_path("pieces-whole.safetensors"), pieces = temp_path("pieces.safetensors");
    runtime::write_safetensors(whole, tensors, metadata);

    std::vector<Piece> order = pieces_of(tensors, 7000, random);
    if (trial % 2) std::shuffle(order.begin(), order.end(), random);  // odd trials out of order; even ones in the data's order
    {
      std::vector<runtime::TensorPlace> places;
      for (const NamedTensor& tensor : tensors) places.push_back({tensor.name, tensor.dtype, tensor.shape});
      runtime::SafetensorsWriter writer(pieces, places, metadata);
      for (const Piece& piece : order) writer.write(tensors[piece.tensor].name, piece.offset, tensors[piece.tensor].bytes.data() + piece.offset, piece.size);
      writer.commit();
    }
    ASSERT_EQ(read_file(pieces), read_file(whole)) << "trial " << trial;

    runtime::SafetensorsReader reader(pieces);
    EXPECT_EQ(reader.header().metadata, metadata);
    std::shuffle(order.begin(), order.end(), random);
    for (const Piece& piece : order) {
      const runtime::TensorPlace* place = reader.header().find(tensors[piece.tensor].name);
      ASSERT_NE(place, nullptr);
      std::vector<unsigned char> got(piece.size);
      reader.read(*place, piece.offset, got.data(), piece.size);
      ASSERT_TRUE(std::equal(got.begin(), got.end(), tensors[piece.tensor].bytes.begin() + static_cast<std::ptrdiff_t>(piece.offset)));
    }
    reader.verify_checksum();
  }
}

TEST(SafetensorsFile, AWriterRefusesMisplacedPiecesAndLeavesNothingWithoutACommit) {
  const fs::path dir = temp_path("writer-dir");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string target = (dir / "state.safetensors").string();
  const std::vector<float> values = {1, 2, 3, 4};
  const std::vector<runtime::TensorPlace> places = {{"a", "F32", {4}}, {"b", "F32", {2, 2}}};
  {
    runtime::SafetensorsWriter writer(target, places);
    writer.write("a", 0, values.data(), 8);
    EXPECT_THROW(writer.write("a", 4, values.data(), 8), std::logic_error);  // overlaps bytes [0, 8)
    EXPECT_THROW(writer.write("a", 12, values.data(), 8), std::out_of_range);  // past the tensor's 16 bytes
    EXPECT_THROW(writer.write("c", 0, values.data(), 4), std::out_of_range);
    writer.write("b", 0, values.data(), 16);
    // Bytes [8, 16) of "a" were never given: the commit says so and leaves nothing.
    try {
      writer.commit();
      ADD_FAILURE() << "a commit with missing bytes succeeded";
    } catch (const SafetensorsError& error) {
      EXPECT_NE(std::string(error.what()).find("byte 8 of tensor \"a\" was never given"), std::string::npos) << error.what();
    }
    EXPECT_THROW(writer.write("a", 8, values.data(), 8), std::logic_error);
  }
  EXPECT_TRUE(fs::is_empty(dir));
  {
    runtime::SafetensorsWriter abandoned(target, places);
    abandoned.write("a", 0, values.data(), 16);
  }
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

struct Reported {
  std::string phase;
  uint64_t done, total;
};

// Every phase of a transfer as the callback saw it, with the phases in order (runs of one phase).
std::vector<std::string> phases_of(const std::vector<Reported>& events) {
  std::vector<std::string> phases;
  for (const Reported& event : events)
    if (phases.empty() || phases.back() != event.phase) phases.push_back(event.phase);
  return phases;
}

// The writer reports each piece as the running total of bytes given, then (pieces out of order)
// the checksum's pass from the bytes hashed in order to the end, then the flush; the reader its
// reads and verify_checksum's pass. Totals are the data buffer's bytes, counted here from the
// tensors themselves.
TEST(SafetensorsFile, WriterAndReaderReportEveryPhaseInBytes) {
  std::mt19937 random(std::random_device{}());
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<NamedTensor> tensors;
    uint64_t total = 0;
    for (int t = 0; t < 1 + static_cast<int>(random() % 5); ++t) {
      NamedTensor tensor{"t" + std::to_string(t), "F32", {1 + static_cast<int64_t>(random() % 3000)}, {}};
      tensor.bytes.resize(static_cast<size_t>(tensor.shape[0]) * 4);
      for (unsigned char& byte : tensor.bytes) byte = static_cast<unsigned char>(random());
      total += tensor.bytes.size();
      tensors.push_back(std::move(tensor));
    }
    std::vector<Piece> order = pieces_of(tensors, 3000, random);
    const bool shuffled = trial % 2 == 1 && order.size() > 1;
    if (shuffled) std::swap(order.front(), order.back());  // the first bytes come last: nothing hashed in order
    const std::string path = temp_path("progress.safetensors");
    std::vector<Reported> events;
    auto record = [&](const runtime::FileProgress& progress) { events.push_back({std::string(progress.phase), progress.done, progress.total}); };
    std::vector<runtime::TensorPlace> places;
    for (const NamedTensor& tensor : tensors) places.push_back({tensor.name, tensor.dtype, tensor.shape});
    {
      runtime::SafetensorsWriter writer(path, places);
      writer.set_progress(record);
      uint64_t given = 0;
      for (const Piece& piece : order) {
        writer.write(tensors[piece.tensor].name, piece.offset, tensors[piece.tensor].bytes.data() + piece.offset, piece.size);
        given += piece.size;
        ASSERT_EQ(events.back().phase, "write");
        ASSERT_EQ(events.back().done, given) << "trial " << trial;
        ASSERT_EQ(events.back().total, total);
      }
      writer.commit();
    }
    ASSERT_EQ(events.front().phase, "write");
    EXPECT_EQ(events.front().done, 0u);  // the start of the phase, before the first piece
    const std::vector<std::string> expected = shuffled ? std::vector<std::string>{"write", "checksum", "sync"} : std::vector<std::string>{"write", "sync"};
    EXPECT_EQ(phases_of(events), expected) << "trial " << trial;
    uint64_t last_checksum = 0;
    for (const Reported& event : events)
      if (event.phase == "checksum") {
        EXPECT_GE(event.done, last_checksum);
        EXPECT_EQ(event.total, total);
        last_checksum = event.done;
      }
    if (shuffled) {
      EXPECT_EQ(last_checksum, total);
    }
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events[events.size() - 2].phase + std::to_string(events[events.size() - 2].done), "sync0");
    EXPECT_EQ(events.back().phase + std::to_string(events.back().done) + "/" + std::to_string(events.back().total), "sync1/1");

    // Reading: the pieces as written (the first bytes last when shuffled), then the checksum's pass
    // over what the reads did not hash in order.
    events.clear();
    runtime::SafetensorsReader reader(path);
    reader.set_progress(record);
    uint64_t read = 0;
    for (const Piece& piece : order) {
      std::vector<unsigned char> got(piece.size);
      reader.read(*reader.header().find(tensors[piece.tensor].name), piece.offset, got.data(), piece.size);
      read += piece.size;
      ASSERT_EQ(events.back().phase + std::to_string(events.back().done) + "/" + std::to_string(events.back().total),
                "read" + std::to_string(read) + "/" + std::to_string(total));
    }
    const size_t reads = events.size();
    reader.verify_checksum();
    EXPECT_EQ(events.front().done, 0u);
    if (shuffled) {
      ASSERT_GT(events.size(), reads) << "the checksum's pass was not reported";
      EXPECT_EQ(events[reads].phase, "checksum");
      // The first bytes were read last: hashed then, and nothing after them in order.
      EXPECT_EQ(events[reads].done, order.back().size);
      EXPECT_EQ(events.back().done, total);
    } else {
      EXPECT_EQ(events.size(), reads) << "every byte was hashed in order; there is no pass to report";
    }
  }
}

// A callback that throws (Python's KeyboardInterrupt at Ctrl-C arrives this way) stops the write
// as a failed write does: the exception reaches the caller, the old file stays, nothing else is left.
TEST(SafetensorsFile, AThrowingProgressCallbackLeavesTheOldFile) {
  const fs::path dir = temp_path("progress-stop");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string target = (dir / "state.safetensors").string();
  runtime::write_safetensors(target, {f32_tensor("a", {2}, {1, 2})});
  const std::string old = read_file(target);
  const std::vector<float> values(1000, 3.0f);
  for (const std::string stop_at : {"write", "sync"}) {
    int calls = 0;
    runtime::SafetensorsWriter writer(target, {{"a", "F32", {1000}}});
    writer.set_progress([&](const runtime::FileProgress& progress) {
      ++calls;
      if (progress.phase == stop_at && progress.done > 0) throw std::runtime_error("stopped by the user");
    });
    try {
      writer.write("a", 0, values.data(), 2000);
      writer.write("a", 2000, values.data() + 500, 2000);
      writer.commit();
      ADD_FAILURE() << "the callback's exception at " << stop_at << " was lost";
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "stopped by the user");
    }
    EXPECT_GT(calls, 1);
  }
  EXPECT_EQ(read_file(target), old);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "a temporary file was left behind";
  fs::remove_all(dir);
}

// Pieces of a megabyte and more are hashed on a second thread beside their write or read
// (runtime/muon/background_digest.h), the reader's in blocks of 8 MiB: the file's checksum is the
// SHA-256 of its data computed here in one call, a flipped byte in any block of such a piece is
// found, and a read that starts before the bytes already hashed hashes only the rest.
TEST(SafetensorsFile, LargePiecesHashBesideTheirIo) {
  std::mt19937 random(std::random_device{}());
  const int64_t elements = (int64_t{21} << 20) / 4 + 3;  // 21 MiB and 12 bytes: three blocks, a short last one
  NamedTensor big{"big", "F32", {elements}, std::vector<unsigned char>(static_cast<size_t>(elements) * 4)};
  for (unsigned char& byte : big.bytes) byte = static_cast<unsigned char>(random());
  const NamedTensor small = f32_tensor("small", {3}, {1, 2, 3});
  const std::string path = temp_path("large.safetensors");
  {
    runtime::SafetensorsWriter writer(path, {{"small", "F32", {3}}, {"big", "F32", {elements}}});
    writer.write("small", 0, small.bytes.data(), small.bytes.size());
    writer.write("big", 0, big.bytes.data(), big.bytes.size());  // in order: hashed beside the write
    writer.commit();
  }
  const std::string data(reinterpret_cast<const char*>(small.bytes.data()), small.bytes.size());
  const std::string expected = sha256_hex(data + std::string(reinterpret_cast<const char*>(big.bytes.data()), big.bytes.size()));
  {
    runtime::SafetensorsReader reader(path);
    ASSERT_TRUE(reader.header().checksum.has_value());
    EXPECT_EQ(*reader.header().checksum, expected);
    // A read from byte 0 of the data, then one that starts inside it: only the rest is hashed.
    std::vector<unsigned char> got(big.bytes.size());
    reader.read(*reader.header().find("small"), 0, got.data(), small.bytes.size());
    reader.read(*reader.header().find("big"), 0, got.data(), (uint64_t{1} << 20) + 5);
    reader.read(*reader.header().find("big"), 1 << 20, got.data() + (1 << 20), got.size() - (1 << 20));
    EXPECT_TRUE(got == big.bytes);
    reader.verify_checksum();
  }
  {
    // verify_checksum alone: its double-buffered pass reuses each buffer (three blocks), and must
    // wait until the second thread has hashed that buffer's last block.
    runtime::SafetensorsReader reader(path);
    EXPECT_NO_THROW(reader.verify_checksum());
  }
  const std::string good = read_file(path);
  const size_t data_start = good.size() - data.size() - big.bytes.size();
  // A flip in each of the three blocks, found by a whole read (hashed as read) and by
  // verify_checksum alone (its double-buffered pass).
  for (const size_t block : {0, 1, 2}) {
    std::string bad = good;
    const size_t at = data_start + data.size() + block * (size_t{8} << 20) + 4096;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    write_file(path, bad);
    for (const bool read_first : {true, false}) {
      runtime::SafetensorsReader reader(path);
      std::vector<unsigned char> got(big.bytes.size());
      if (read_first) {  // "small", then all of "big": hashed as read, beside the reads
        reader.read(*reader.header().find("small"), 0, got.data(), small.bytes.size());
        reader.read(*reader.header().find("big"), 0, got.data(), got.size());
      }
      try {
        reader.verify_checksum();
        ADD_FAILURE() << "a flip in block " << block << " passed (" << (read_first ? "read, then verified" : "verified alone") << ")";
      } catch (const SafetensorsError& error) {
        EXPECT_NE(std::string(error.what()).find("the data is corrupt"), std::string::npos) << error.what();
      }
    }
  }
  fs::remove(path);
}

// A flipped byte is found whether or not the reads covered it, and a truncated file is named as
// such; the header alone is read on opening.
TEST(SafetensorsFile, AReaderChecksWhatItDidNotRead) {
  std::vector<float> values(3000);
  std::iota(values.begin(), values.end(), 0.5f);
  const std::string path = temp_path("reader.safetensors");
  runtime::write_safetensors(path, {f32_tensor("a", {1000}, {values.begin(), values.begin() + 1000}), f32_tensor("b", {2000}, {values.begin() + 1000, values.end()})});
  const std::string good = read_file(path);
  // "a" is bytes [size - 12000, size - 8000) of the file, "b" the last 8000. A flip inside "b",
  // which verify_checksum streams, and one inside "a" after all of "a" was read (hashed as read).
  for (const size_t flipped : {good.size() - 3, good.size() - 8000 - 100}) {
    std::string bad = good;
    bad[flipped] = static_cast<char>(bad[flipped] ^ 0x10);
    write_file(path, bad);
    runtime::SafetensorsReader reader(path);
    std::vector<float> a(1000);
    reader.read(*reader.header().find("a"), 0, a.data(), 4000);
    EXPECT_EQ(a[0], 0.5f);
    for (int call = 0; call < 2; ++call) {  // a second call says it again
      try {
        reader.verify_checksum();
        ADD_FAILURE() << "a flipped byte at " << flipped << " passed the checksum (call " << call << ")";
      } catch (const SafetensorsError& error) {
        EXPECT_NE(std::string(error.what()).find("the data is corrupt"), std::string::npos) << error.what();
      }
    }
  }
  write_file(path, good);
  runtime::SafetensorsReader reader(path);
  const runtime::TensorPlace b = *reader.header().find("b");
  float last = 0;
  reader.read(b, 1999 * 4, &last, 4);
  EXPECT_EQ(last, 2999.5f);
  EXPECT_THROW(reader.read(b, 1999 * 4, &last, 8), std::out_of_range);
  ::truncate(path.c_str(), static_cast<off_t>(good.size() - 100));  // under the open reader
  try {
    reader.verify_checksum();
    ADD_FAILURE() << "a truncated file passed";
  } catch (const SafetensorsError& error) {
    EXPECT_NE(std::string(error.what()).find("the file ended early"), std::string::npos) << error.what();
  }
  fs::remove(path);
}

}  // namespace
}  // namespace orthojit
