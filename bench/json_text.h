// JSON string literals for the standalone GPU-side benchmarks (gpu_bench.cpp, cuda_compile_bench.cpp),
// which write their JSON by hand: the GPU machines' build may have no JSON library.
#pragma once

#include <string>

namespace orthojit::bench {

// `text` as a JSON string: quotes and backslashes escaped, newlines as \n, other control
// characters as spaces (error messages from NVRTC and the driver carry them).
inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

}  // namespace orthojit::bench
