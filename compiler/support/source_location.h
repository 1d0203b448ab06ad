// A position in DSL text, and the error type every compiler stage reports with.
#pragma once

#include <stdexcept>
#include <string>

namespace orthojit {

struct SourceLocation {
  std::string file;  // "<string>" for in-memory text, "<builder>" for the C++ builder API
  int line = 0;      // 1-based; 0 = unknown
  int column = 0;    // 1-based
  std::string to_string() const;  // "file:line:column"
};

// Any user-facing error of the compiler (parse, semantic, shape, strategy). `what()` is the full
// "file:line:col: error: message" text; the parts are kept for tests and tools.
class CompileError : public std::runtime_error {
 public:
  CompileError(SourceLocation location, const std::string& message);
  const SourceLocation& location() const { return location_; }
  const std::string& message() const { return message_; }

 private:
  SourceLocation location_;
  std::string message_;
};

}  // namespace orthojit
