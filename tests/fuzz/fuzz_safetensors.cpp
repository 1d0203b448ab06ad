// Fuzz target: the safetensors reader (runtime::parse_safetensors: the header checks that
// read_safetensors and SafetensorsReader run on a file, and the checksum, on bytes in memory). Every input is a file or a SafetensorsError; a file that parses must write
// back (serialize_safetensors) and read again to the same tensors and metadata: what the reader
// accepts, the writer can write.
#include <string>

#include "fuzz_target.h"
#include "runtime/muon/safetensors_file.h"

namespace rt = orthojit::runtime;

ORTHOJIT_FUZZ_TARGET(safetensors) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  rt::SafetensorsFile file;
  try {
    file = rt::parse_safetensors(bytes, "fuzz.safetensors");
  } catch (const rt::SafetensorsError&) {
    return 0;
  } catch (const std::exception& error) {
    fuzz_failure(std::string("parse_safetensors threw something other than SafetensorsError: ") + error.what());
  }
  try {
    const std::string written = rt::serialize_safetensors(file.tensors, file.metadata, "fuzz round trip");
    const rt::SafetensorsFile again = rt::parse_safetensors(written, "fuzz round trip");
    fuzz_check(again.tensors.size() == file.tensors.size(), "the round trip changed the number of tensors");
    for (size_t i = 0; i < file.tensors.size(); ++i) {
      const rt::NamedTensor& a = file.tensors[i];
      const rt::NamedTensor& b = again.tensors[i];
      fuzz_check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes, "the round trip changed tensor \"" + a.name + "\"");
    }
    fuzz_check(again.metadata == file.metadata, "the round trip changed the metadata");
    fuzz_check(again.checksum.has_value(), "a written file has no checksum");
  } catch (const rt::SafetensorsError& error) {
    fuzz_failure(std::string("a file the reader accepted cannot be written back: ") + error.what());
  }
  return 0;
}
