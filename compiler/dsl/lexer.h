// Splits DSL text into tokens with their line:column. Comments (`#` or `//` to end of line) and
// whitespace are skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "support/source_location.h"

namespace orthojit::dsl {

struct Token {
  enum class Kind { Identifier, Number, Punct, End };
  Kind kind = Kind::End;
  std::string text;  // identifier / number spelling / punctuation (".T" is one token)
  double number = 0;
  SourceLocation location;
  std::string describe() const;  // for "found ..." in error messages
};

// Throws CompileError on a character that starts no token, or a malformed number.
std::vector<Token> tokenize(std::string_view text, const std::string& file_name);

}  // namespace orthojit::dsl
