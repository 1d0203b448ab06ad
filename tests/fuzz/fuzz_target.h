// One fuzz target per reader (tests/fuzz/fuzz_<reader>.cpp). Each defines its entry function
// with ORTHOJIT_FUZZ_TARGET(name): under libFuzzer (the ORTHOJIT_BUILD_FUZZERS build) it is also
// LLVMFuzzerTestOneInput; in the normal build tests/fuzz/replay_main.cpp calls the same function
// on every file of tests/fuzz/regressions/<name>/ and tests/fuzz/corpus/<name>/, so a crash found
// once stays fixed without libFuzzer.
//
// A target fails loudly (fuzz_failure: a message, then abort, which libFuzzer and the replay both
// report) when a reader throws anything but its documented error, or breaks a property the
// target checks (a round trip, a count); a sanitizer report fails it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace orthojit::fuzz {

[[noreturn]] inline void fuzz_failure(const std::string& what) {
  std::fprintf(stderr, "fuzz target failure: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline void fuzz_check(bool condition, const std::string& what) {
  if (!condition) fuzz_failure(what);
}

using FuzzEntry = int (*)(const uint8_t* data, size_t size);

}  // namespace orthojit::fuzz

#ifdef ORTHOJIT_FUZZ_REPLAY
#define ORTHOJIT_FUZZ_TARGET(name)                                                                       \
  namespace orthojit::fuzz {                                                                             \
  int fuzz_##name(const uint8_t* data, size_t size);                                                     \
  }                                                                                                      \
  int orthojit::fuzz::fuzz_##name(const uint8_t* data, size_t size)
#else
#define ORTHOJIT_FUZZ_TARGET(name)                                                                       \
  namespace orthojit::fuzz {                                                                             \
  int fuzz_##name(const uint8_t* data, size_t size);                                                     \
  }                                                                                                      \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return orthojit::fuzz::fuzz_##name(data, size); } \
  int orthojit::fuzz::fuzz_##name(const uint8_t* data, size_t size)
#endif
