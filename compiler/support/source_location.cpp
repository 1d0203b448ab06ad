// Source positions and compile errors.
#include "support/source_location.h"

namespace orthojit {

std::string SourceLocation::to_string() const {
  if (line == 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

namespace {
std::string format_error(const SourceLocation& location, const std::string& message) {
  std::string where = location.to_string();
  return (where.empty() ? std::string() : where + ": ") + "error: " + message;
}
}  // namespace

CompileError::CompileError(SourceLocation location, const std::string& message)
    : std::runtime_error(format_error(location, message)),
      location_(std::move(location)),
      message_(message) {}

}  // namespace orthojit
