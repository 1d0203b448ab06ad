// What went wrong, in one classification for the three boundaries: the CLI's exit code, the C
// API's status (include/orthojit/orthojit.h) and the Python exception (bindings/python) are all
// read off the ErrorKind that classify_exception gives a caught exception, so the same mistake is
// "bad input" everywhere (an unknown preset: exit 2, OJ_INVALID_ARGUMENT, ValueError).
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace orthojit::runtime {

enum class ErrorKind {
  BadInput,      // the caller's input is wrong: a bad option value, program text, shape, setting
  Unavailable,   // a valid request this build or machine cannot run (a backend, a part not built)
  Io,            // a file could not be read or written, or is not a valid file of its kind
  InvalidState,  // the call is not allowed now (a parameter added after the optimizer was built)
  OutOfMemory,
  Internal,      // anything else: a bug in orthojit
};

const char* to_string(ErrorKind kind);  // "bad input", "unavailable", "i/o", ...

// An error that states its kind. The layers throw the subclasses below; classify_exception reads
// `kind()` before looking at any other type.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Bad input from the user (a wrong option value, a missing option, an unknown name).
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(ErrorKind::BadInput, message) {}

 protected:
  UsageError(ErrorKind kind, const std::string& message) : Error(kind, message) {}
};

// A backend or part this build or machine cannot run. A UsageError too: code that only tells
// good input from bad still refuses it, and the CLI's exit code (2) is the same.
class UnavailableError : public UsageError {
 public:
  explicit UnavailableError(const std::string& message) : UsageError(ErrorKind::Unavailable, message) {}
};

// A file that cannot be read or written (the message names it and says why).
class FileError : public Error {
 public:
  explicit FileError(const std::string& message) : Error(ErrorKind::Io, message) {}
};

// A call made at the wrong time (the C API's optimizer handles: options that only apply before build).
class InvalidStateError : public Error {
 public:
  explicit InvalidStateError(const std::string& message) : Error(ErrorKind::InvalidState, message) {}
};

struct ClassifiedError {
  ErrorKind kind = ErrorKind::Internal;
  std::string message;   // what() ("out of memory" for std::bad_alloc, "unknown exception" for a non-std one)
  bool located = false;  // the message starts with its source location ("file:line:col: error: ..."): a CompileError
};

// The one classification of a caught exception:
//   Error (UsageError, UnavailableError, FileError, InvalidStateError)  its kind()
//   CompileError (DSL text, shapes, strategies; with a location)        BadInput, located
//   std::invalid_argument (DeepSpeedConfigError, the settings' parsers), std::out_of_range,
//   std::domain_error, std::length_error                                BadInput
//   cpu::PartNotBuilt (a part this build left out)                      Unavailable
//   NpyError, SafetensorsError, std::filesystem::filesystem_error,
//   std::ios_base::failure                                              Io
//   std::bad_alloc                                                      OutOfMemory
//   any other std::runtime_error                                        `plain_runtime_error`
//   anything else                                                       Internal
// `plain_runtime_error` is what an untyped std::runtime_error means where it was caught: Internal
// by default; the optimizer-state readers (muon/state_format.cpp) throw it for a state file that
// does not match, so the C API's save/load entry points pass Io.
ClassifiedError classify_exception(const std::exception_ptr& error, ErrorKind plain_runtime_error = ErrorKind::Internal);

// The CLI's exit code of a kind: 2 for what the user can fix (bad input, unavailable, a file),
// 1 for the rest (internal errors, out of memory). 0 is success and never an error's.
int cli_exit_code(ErrorKind kind);

}  // namespace orthojit::runtime
