// Fuzz target: the CUDA program-cache file reader (cuda::deserialize_program_file, what a cache
// lookup runs on a file's bytes; no NVRTC or GPU needed). The input is read twice: as a whole file,
// and as the payload of a file whose header (magic, version, key, arch, size, SHA-256) is
// correct, so that the payload parser behind the checksum is reached too. Every input is a miss
// (nullopt) or an output for the arch asked for; an output must serialize to a file that reads
// back to the same output.
#include <string>

#include "cuda/program_file.h"
#include "fuzz_target.h"
#include "support/sha256.h"

namespace cu = orthojit::cuda;

namespace {

bool same_output(const cu::NvrtcOutput& a, const cu::NvrtcOutput& b) {
  if (a.arch != b.arch || a.image != b.image || a.log != b.log || a.options != b.options || a.resources.size() != b.resources.size()) return false;
  for (const auto& [kernel, resources] : a.resources) {
    const auto other = b.resources.find(kernel);
    if (other == b.resources.end()) return false;
    const cu::KernelResources& r = other->second;
    if (r.registers != resources.registers || r.spill_store_bytes != resources.spill_store_bytes || r.spill_load_bytes != resources.spill_load_bytes ||
        r.stack_bytes != resources.stack_bytes || r.shared_bytes != resources.shared_bytes)
      return false;
  }
  return true;
}

}  // namespace

ORTHOJIT_FUZZ_TARGET(program_cache) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string key(64, 'a');
  const std::string arch = "sm_90";
  cu::ByteWriter framed;
  framed.raw(cu::kProgramFileMagic);
  framed.u64(cu::kProgramCacheFormatVersion);
  framed.text(key);
  framed.text(arch);
  framed.u64(input.size());
  framed.text(orthojit::sha256_hex(input));
  framed.raw(input);
  for (const std::string& bytes : {input, framed.bytes()}) {
    std::optional<cu::NvrtcOutput> output;
    try {
      output = cu::deserialize_program_file(bytes, key, arch);
    } catch (const std::exception& error) {
      fuzz_failure(std::string("deserialize_program_file threw (a damaged file must be a miss): ") + error.what());
    }
    if (!output) continue;
    fuzz_check(output->arch == arch, "deserialize_program_file returned an output for arch " + output->arch);
    const std::optional<cu::NvrtcOutput> again = cu::deserialize_program_file(cu::serialize_program_file(key, *output), key, arch);
    fuzz_check(again && same_output(*again, *output), "an output read from a file does not survive being written and read again");
  }
  return 0;
}
