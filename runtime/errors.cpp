// The classification of caught exceptions (runtime/errors.h).
#include "runtime/errors.h"

#include <filesystem>
#include <ios>
#include <new>

#include "cpu/build_status.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/npy_file.h"
#include "support/source_location.h"

namespace orthojit::runtime {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadInput: return "bad input";
    case ErrorKind::Unavailable: return "unavailable";
    case ErrorKind::Io: return "i/o";
    case ErrorKind::InvalidState: return "invalid state";
    case ErrorKind::OutOfMemory: return "out of memory";
    case ErrorKind::Internal: return "internal";
  }
  return "internal";
}

ClassifiedError classify_exception(const std::exception_ptr& error, ErrorKind plain_runtime_error) {
  // The order matters where the types derive from each other: Error before std::runtime_error,
  // std::ios_base::failure (a std::system_error) and the typed file errors before the plain one.
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  } catch (const CompileError& e) {
    return {ErrorKind::BadInput, e.what(), true};
  } catch (const std::invalid_argument& e) {
    return {ErrorKind::BadInput, e.what()};
  } catch (const std::out_of_range& e) {
    return {ErrorKind::BadInput, e.what()};
  } catch (const std::domain_error& e) {
    return {ErrorKind::BadInput, e.what()};
  } catch (const std::length_error& e) {
    return {ErrorKind::BadInput, e.what()};
  } catch (const cpu::PartNotBuilt& e) {
    return {ErrorKind::Unavailable, e.what()};
  } catch (const NpyError& e) {
    return {ErrorKind::Io, e.what()};
  } catch (const SafetensorsError& e) {
    return {ErrorKind::Io, e.what()};
  } catch (const std::filesystem::filesystem_error& e) {
    return {ErrorKind::Io, e.what()};
  } catch (const std::ios_base::failure& e) {
    return {ErrorKind::Io, e.what()};
  } catch (const std::bad_alloc&) {
    return {ErrorKind::OutOfMemory, "out of memory"};
  } catch (const std::runtime_error& e) {
    return {plain_runtime_error, e.what()};
  } catch (const std::exception& e) {
    return {ErrorKind::Internal, e.what()};
  } catch (...) {
    return {ErrorKind::Internal, "unknown exception"};
  }
}

int cli_exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadInput:
    case ErrorKind::Unavailable:
    case ErrorKind::Io: return 2;
    case ErrorKind::InvalidState:
    case ErrorKind::OutOfMemory:
    case ErrorKind::Internal: return 1;
  }
  return 1;
}

}  // namespace orthojit::runtime
