// How deeply a JSON text nests its arrays and objects, measured on the text before it is parsed.
// The documents orthojit reads (model configurations, DeepSpeed configurations, tuning records)
// are a few levels deep. nlohmann's parser accepts any depth, but copying or walking the document
// it builds recurses once per level: `orthojit memory` on a file of 100000 nested objects
// overflowed the stack (rc 139). So each reader refuses a text nested deeper than kMaxJsonDepth,
// with its own error type, before parsing it.
#pragma once

#include <string>
#include <string_view>

namespace orthojit::autotune {

inline constexpr int kMaxJsonDepth = 64;

// "" when `text` nests at most kMaxJsonDepth levels, else what is wrong (with the byte offset).
// Brackets inside strings do not count; the text need not be valid JSON (the parser judges that).
inline std::string json_depth_problem(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t at = 0; at < text.size(); ++at) {
    const char c = text[at];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return "arrays and objects nested more than " + std::to_string(kMaxJsonDepth) + " levels deep (at byte " + std::to_string(at) +
               "); a configuration is a few levels deep";
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return "";
}

}  // namespace orthojit::autotune
