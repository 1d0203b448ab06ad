// The DSL tokenizer.
#include "dsl/lexer.h"

#include <cctype>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <string>

namespace orthojit::dsl {

std::string Token::describe() const {
  switch (kind) {
    case Kind::Identifier: return "'" + text + "'";
    case Kind::Number: return "number " + text;
    case Kind::Punct: return "'" + text + "'";
    case Kind::End: return "end of file";
  }
  return text;
}

namespace {

bool is_identifier_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::vector<Token> tokenize(std::string_view text, const std::string& file_name) {
  std::vector<Token> tokens;
  int line = 1, column = 1;
  size_t i = 0;
  auto here = [&] { return SourceLocation{file_name, line, column}; };
  auto advance = [&](size_t count) {
    for (size_t k = 0; k < count && i < text.size(); ++k, ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      advance(1);
      continue;
    }
    if (c == '#' || (c == '/' && i + 1 < text.size() && text[i + 1] == '/')) {
      while (i < text.size() && text[i] != '\n') advance(1);
      continue;
    }
    Token token;
    token.location = here();
    if (is_identifier_start(c)) {
      size_t end = i;
      while (end < text.size() && is_identifier_char(text[end])) ++end;
      token.kind = Token::Kind::Identifier;
      token.text = std::string(text.substr(i, end - i));
      advance(end - i);
    } else if (is_digit(c) || (c == '.' && i + 1 < text.size() && is_digit(text[i + 1]))) {
      // Digits, an optional fraction, an optional exponent. strtod checks the spelling.
      size_t end = i;
      while (end < text.size() && (is_digit(text[end]) || text[end] == '.')) ++end;
      if (end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
        size_t exponent = end + 1;
        if (exponent < text.size() && (text[exponent] == '+' || text[exponent] == '-')) ++exponent;
        if (exponent < text.size() && is_digit(text[exponent])) {
          end = exponent;
          while (end < text.size() && is_digit(text[end])) ++end;
        }
      }
      token.kind = Token::Kind::Number;
      token.text = std::string(text.substr(i, end - i));
      char* parsed_end = nullptr;
      token.number = std::strtod(token.text.c_str(), &parsed_end);
      if (parsed_end != token.text.c_str() + token.text.size())
        throw CompileError(token.location, "malformed number '" + token.text + "'");
      // strtod gives an infinity for 1e400: a coefficient of inf made every output NaN, silently.
      if (!std::isfinite(token.number))
        throw CompileError(token.location, "number " + token.text + " is beyond the range of a double (about 1.8e308)");
      if (end < text.size() && is_identifier_start(text[end]))
        throw CompileError(SourceLocation{file_name, line, column + static_cast<int>(end - i)},
                           "unexpected '" + std::string(1, text[end]) + "' right after number " +
                               token.text + "; expected an operator, ',' or ')'");
      advance(end - i);
    } else if (c == '.' && i + 1 < text.size() && text[i + 1] == 'T' &&
               (i + 2 >= text.size() || !is_identifier_char(text[i + 2]))) {
      token.kind = Token::Kind::Punct;
      token.text = ".T";
      advance(2);
    } else if (std::string_view("{}()[];,=+-*@").find(c) != std::string_view::npos) {
      token.kind = Token::Kind::Punct;
      token.text = std::string(1, c);
      advance(1);
    } else {
      // A byte that does not print, in hexadecimal ("\xc3": the first byte of a pasted UTF-8 '×').
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      const std::string shown = std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c) : std::string(hex);
      throw CompileError(token.location,
                         "unexpected character '" + shown +
                             "'; expected a name, a number, an operator (+ - * @ .T) or one of { } ( ) [ ] ; , =");
    }
    tokens.push_back(std::move(token));
  }
  Token end;
  end.kind = Token::Kind::End;
  end.location = here();
  tokens.push_back(end);
  return tokens;
}

}  // namespace orthojit::dsl
