// fuzz_replay TARGET PATH...: feeds every file under each PATH (a file or a folder, recursively;
// a missing folder is skipped) to the fuzz target TARGET's entry function, as libFuzzer would, and
// fails when the target aborts (a reader crashed, threw the wrong error or broke a property; see
// fuzz_target.h). Used by ctest on tests/fuzz/regressions/TARGET and tests/fuzz/corpus/TARGET.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace orthojit::fuzz {
int fuzz_dsl(const uint8_t*, size_t);
int fuzz_npy(const uint8_t*, size_t);
int fuzz_safetensors(const uint8_t*, size_t);
int fuzz_tuning_record(const uint8_t*, size_t);
int fuzz_program_cache(const uint8_t*, size_t);
int fuzz_deepspeed_config(const uint8_t*, size_t);
int fuzz_model_config(const uint8_t*, size_t);
}  // namespace orthojit::fuzz

int main(int argc, char** argv) {
  namespace fz = orthojit::fuzz;
  const std::map<std::string, fz::FuzzEntry> targets = {
      {"dsl", fz::fuzz_dsl},           {"npy", fz::fuzz_npy},
      {"safetensors", fz::fuzz_safetensors},
      {"tuning_record", fz::fuzz_tuning_record}, {"program_cache", fz::fuzz_program_cache},
      {"deepspeed_config", fz::fuzz_deepspeed_config}, {"model_config", fz::fuzz_model_config}};
  const auto target = argc > 1 ? targets.find(argv[1]) : targets.end();
  if (target == targets.end()) {
    std::string names;
    for (const auto& [name, entry] : targets) names += " " + name;
    std::fprintf(stderr, "usage: fuzz_replay TARGET PATH...; TARGET is one of:%s\n", names.c_str());
    return 2;
  }
  std::vector<std::filesystem::path> files;
  for (int i = 2; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    if (std::filesystem::is_regular_file(path)) files.push_back(path);
    else if (std::filesystem::is_directory(path))
      for (const auto& entry : std::filesystem::recursive_directory_iterator(path))
        if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "fuzz_replay: cannot read %s\n", file.string().c_str());
      return 1;
    }
    std::fprintf(stderr, "%s\n", file.string().c_str());  // the input a failure belongs to is the last line printed
    target->second(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("fuzz_replay %s: %zu inputs, no failure\n", argv[1], files.size());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: no input files under the paths given (is the corpus missing?)\n");
    return 1;
  }
  return 0;
}
