// runtime::classify_exception, row by row: each exception type the layers throw, the kind it gets,
// whether its message carries a source location, and the CLI's exit code of that kind. The
// boundaries themselves (the CLI, the C API, Python) are driven by tests/error_boundaries_test.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <ios>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include "cpu/build_status.h"
#include "runtime/errors.h"
#include "runtime/muon/deepspeed_config.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/npy_file.h"
#include "support/source_location.h"

namespace {

using namespace orthojit;
using runtime::ErrorKind;

struct Row {
  const char* what;
  std::function<void()> thrower;
  ErrorKind kind;
  bool located;
  const char* message;  // what the classification reports
};

TEST(Errors, EveryExceptionTypeHasItsKind) {
  const Row rows[] = {
      {"UsageError", [] { throw runtime::UsageError("unknown strategy 'x'"); }, ErrorKind::BadInput, false, "unknown strategy 'x'"},
      {"UnavailableError", [] { throw runtime::UnavailableError("--backend cuda: no driver"); }, ErrorKind::Unavailable, false, "--backend cuda: no driver"},
      {"FileError", [] { throw runtime::FileError("cannot read f"); }, ErrorKind::Io, false, "cannot read f"},
      {"InvalidStateError", [] { throw runtime::InvalidStateError("after build"); }, ErrorKind::InvalidState, false, "after build"},
      {"CompileError", [] { throw CompileError({"p.oj", 3, 7}, "expected '{'"); }, ErrorKind::BadInput, true, "p.oj:3:7: error: expected '{'"},
      {"std::invalid_argument", [] { throw std::invalid_argument("unknown optimizer preset"); }, ErrorKind::BadInput, false, "unknown optimizer preset"},
      {"DeepSpeedConfigError", [] { throw runtime::DeepSpeedConfigError("params.lr: not a number"); }, ErrorKind::BadInput, false, "params.lr: not a number"},
      {"std::out_of_range", [] { throw std::out_of_range("step 9"); }, ErrorKind::BadInput, false, "step 9"},
      {"std::domain_error", [] { throw std::domain_error("d"); }, ErrorKind::BadInput, false, "d"},
      {"std::length_error", [] { throw std::length_error("l"); }, ErrorKind::BadInput, false, "l"},
      {"cpu::PartNotBuilt", [] { throw cpu::PartNotBuilt("this build has no CPU backend"); }, ErrorKind::Unavailable, false, "this build has no CPU backend"},
      {"NpyError", [] { throw runtime::NpyError("x.npy: cannot open for reading"); }, ErrorKind::Io, false, "x.npy: cannot open for reading"},
      {"SafetensorsError", [] { throw runtime::SafetensorsError("not a valid safetensors file"); }, ErrorKind::Io, false, "not a valid safetensors file"},
      {"filesystem_error",
       [] { throw std::filesystem::filesystem_error("rename", std::make_error_code(std::errc::permission_denied)); }, ErrorKind::Io, false, nullptr},
      {"ios_base::failure", [] { throw std::ios_base::failure("write failed"); }, ErrorKind::Io, false, nullptr},
      {"std::bad_alloc", [] { throw std::bad_alloc(); }, ErrorKind::OutOfMemory, false, "out of memory"},
      {"std::runtime_error", [] { throw std::runtime_error("plain"); }, ErrorKind::Internal, false, "plain"},
      {"std::logic_error", [] { throw std::logic_error("a bug"); }, ErrorKind::Internal, false, "a bug"},
      {"int", [] { throw 7; }, ErrorKind::Internal, false, "unknown exception"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.what);
    std::exception_ptr caught;
    try {
      row.thrower();
    } catch (...) {
      caught = std::current_exception();
    }
    ASSERT_TRUE(caught);
    const runtime::ClassifiedError error = runtime::classify_exception(caught);
    EXPECT_EQ(error.kind, row.kind) << runtime::to_string(error.kind) << " instead of " << runtime::to_string(row.kind);
    EXPECT_EQ(error.located, row.located);
    if (row.message) EXPECT_EQ(error.message, row.message);
    else EXPECT_FALSE(error.message.empty());
    // Where a plain std::runtime_error means a file problem (the C API's save and load), only
    // the plain one changes kind: every typed error keeps its own.
    const runtime::ClassifiedError as_file = runtime::classify_exception(caught, ErrorKind::Io);
    EXPECT_EQ(as_file.kind, std::string(row.what) == "std::runtime_error" ? ErrorKind::Io : row.kind);
  }
}

TEST(Errors, TheCliExitCodeOfEachKind) {
  // tests/cli_test.sh's contract: 2 for what the user can fix, 1 for the rest.
  EXPECT_EQ(runtime::cli_exit_code(ErrorKind::BadInput), 2);
  EXPECT_EQ(runtime::cli_exit_code(ErrorKind::Unavailable), 2);
  EXPECT_EQ(runtime::cli_exit_code(ErrorKind::Io), 2);
  EXPECT_EQ(runtime::cli_exit_code(ErrorKind::InvalidState), 1);
  EXPECT_EQ(runtime::cli_exit_code(ErrorKind::OutOfMemory), 1);
  EXPECT_EQ(runtime::cli_exit_code(ErrorKind::Internal), 1);
}

TEST(Errors, AnUnavailableBackendIsStillAUsageError) {
  // Code that only tells good input from bad (catch UsageError) keeps refusing it.
  try {
    throw runtime::UnavailableError("no");
  } catch (const runtime::UsageError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Unavailable);
  }
}

}  // namespace
