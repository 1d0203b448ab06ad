// orthojit._orthojit, the compiler part: programs, orthogonalize, compiled kernels, tune, bench, info.
//
// Arrays cross through nanobind's ndarray (DLPack or the buffer protocol): NumPy arrays and
// PyTorch CPU tensors are read and written where they are, with no copy. The core takes float32
// and float64 in host memory, C-contiguous, 2-D (one matrix) or 3-D (a batch); anything else is a
// TypeError (dtype, device) or ValueError (rank, layout, shape) naming what came and what is
// accepted. orthojit/api.py converts what it can (torch bf16/f16, ml_dtypes bf16, CUDA tensors)
// before it calls in here. The structured results (tune, bench, info) come back as the JSON text
// the CLI prints with --json (runtime/records.h); api.py parses it.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include "bindings/python/bindings.h"
#include "cpu/openblas_library.h"
#include "runtime/model_config.h"
#include "runtime/records.h"
#include "ir/lower_program.h"
#include "ir/printer.h"
#include "kernels/program_library.h"
#include "reference/interpreter.h"
#include "runtime/errors.h"
#include "runtime/input_check.h"
#include "runtime/orthogonalize.h"
#include "runtime/shared_options.h"
#include "support/source_location.h"

namespace nb = nanobind;

namespace orthojit::python {
namespace {

// The Python exception of each error kind (runtime/errors.h): bad input and a backend that cannot
// run here are ValueErrors (as for every other bad argument), a file that cannot be read or
// written an OSError, out of memory a MemoryError, the rest RuntimeErrors.
PyObject* python_exception_of(runtime::ErrorKind kind) {
  switch (kind) {
    case runtime::ErrorKind::BadInput:
    case runtime::ErrorKind::Unavailable: return PyExc_ValueError;
    case runtime::ErrorKind::Io: return PyExc_OSError;
    case runtime::ErrorKind::OutOfMemory: return PyExc_MemoryError;
    case runtime::ErrorKind::InvalidState:
    case runtime::ErrorKind::Internal: return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

// ---- programs -------------------------------------------------------------------------------

// A loaded program, shared by the Program objects and the caches. `id` keys compiled kernels.
struct ProgramObject {
  std::shared_ptr<const dsl::Program> program;
  std::string origin;  // "shipped", "file" or "source"
  std::string where;   // the shipped name, the path, or "<string>"
  uint64_t id = 0;
};
using ProgramPtr = std::shared_ptr<ProgramObject>;

ProgramPtr make_program(dsl::Program program, std::string origin, std::string where) {
  static std::atomic<uint64_t> next_id{1};
  auto object = std::make_shared<ProgramObject>();
  object->program = std::make_shared<const dsl::Program>(std::move(program));
  object->origin = std::move(origin);
  object->where = std::move(where);
  object->id = next_id++;
  return object;
}

bool looks_like_source(const std::string& text) {
  return text.find('{') != std::string::npos || text.find('\n') != std::string::npos || text.find(';') != std::string::npos;
}

// A shipped name, a path to a .oj file, or DSL source text. Shipped names and source texts are
// cached by their text, files by path and modification time, so that a program named by a string
// reuses its compiled kernels across calls. Throws CompileError (file:line:column: error: ...).
ProgramPtr load_program_text(const std::string& text) {
  static std::mutex mutex;
  static std::map<std::string, ProgramPtr> cache;
  std::string key, origin;
  std::error_code error;
  if (kernels::find_shipped_program(text)) {
    key = "shipped:" + text;
    origin = "shipped";
  } else if (!looks_like_source(text) && std::filesystem::is_regular_file(text, error)) {
    const auto stamp = std::filesystem::last_write_time(text, error).time_since_epoch().count();
    key = "file:" + std::filesystem::absolute(text, error).string() + "@" + std::to_string(stamp);
    origin = "file";
  } else if (looks_like_source(text)) {
    key = "source:" + text;
    origin = "source";
  } else {
    kernels::load_program_by_name_or_path(text);  // throws the error naming the shipped programs
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto found = cache.find(key); found != cache.end()) return found->second;
  }
  ProgramPtr loaded = origin == "source" ? make_program(ir::load_program(text, "<string>"), origin, "<string>")
                                         : make_program(kernels::load_program_by_name_or_path(text), origin, text);
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 256) cache.clear();
  cache.emplace(key, loaded);
  return loaded;
}

std::string python_type_name(nb::handle object) { return nb::type_name(object.type()).c_str(); }

// A Program object or a string (name, path or source).
ProgramPtr resolve_program(nb::handle program) {
  if (nb::isinstance<ProgramObject>(program)) return nb::cast<ProgramPtr>(program);
  if (nb::isinstance<nb::str>(program)) return load_program_text(nb::cast<std::string>(program));
  throw nb::type_error(("program: expected a shipped name, a .oj path, DSL source text or an orthojit.Program, got " + python_type_name(program)).c_str());
}

// ---- arrays -------------------------------------------------------------------------------

using ReadArray = nb::ndarray<nb::ro>;
using WriteArray = nb::ndarray<>;

std::string dtype_name(nb::dlpack::dtype dtype) {
  std::string name;
  switch (static_cast<nb::dlpack::dtype_code>(dtype.code)) {
    case nb::dlpack::dtype_code::Int: name = "int"; break;
    case nb::dlpack::dtype_code::UInt: name = "uint"; break;
    case nb::dlpack::dtype_code::Float: name = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: name = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: name = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default: name = "dtype code " + std::to_string(dtype.code) + " of ";
  }
  name += std::to_string(dtype.bits);
  if (dtype.lanes > 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

std::string device_name(int device_type, int device_id) {
  switch (device_type) {
    case 1: return "cpu";
    case 2: return "cuda:" + std::to_string(device_id);
    case 3: return "cuda_host (pinned)";
    case 10: return "rocm:" + std::to_string(device_id);
    case 13: return "cuda_managed";
    default: return "device type " + std::to_string(device_type);
  }
}

template <typename Array>
std::string shape_string(const Array& array) {
  std::string text = "(";
  for (size_t i = 0; i < array.ndim(); ++i) text += (i ? ", " : "") + std::to_string(array.shape(i));
  return text + (array.ndim() == 1 ? ",)" : ")");
}

template <typename Array>
bool c_contiguous(const Array& array) {
  if (!array.stride_ptr()) return true;
  int64_t expected = 1;
  for (size_t i = array.ndim(); i-- > 0;) {
    if (array.shape(i) != 1 && array.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(array.shape(i));
  }
  return true;
}

template <typename Array>
std::string strides_string(const Array& array) {
  std::string text = "(";
  for (size_t i = 0; i < array.ndim(); ++i) text += (i ? ", " : "") + std::to_string(array.stride(i));
  return text + ") elements";
}

// The matrices an array holds: batch x rows x cols, f32 or f64, host memory, C order.
struct Matrices {
  const void* data = nullptr;
  bool f64 = false;
  int64_t batch = 1, rows = 0, cols = 0;
  size_t ndim = 2;
  size_t count() const { return static_cast<size_t>(batch * rows * cols); }
};

constexpr const char* kAccepted = "float32 or float64 (orthojit.orthogonalize also converts torch bfloat16/float16 and ml_dtypes bfloat16)";

template <typename Array>
Matrices inspect(const Array& array, const char* what) {
  if (array.device_type() != nb::device::cpu::value)
    throw nb::type_error((std::string(what) + " is in " + device_name(array.device_type(), array.device_id()) +
                          " memory; the core reads host (cpu) memory: pass a NumPy array or a CPU tensor (orthojit.orthogonalize moves CUDA tensors "
                          "through the host for backend='cuda')")
                             .c_str());
  const nb::dlpack::dtype dtype = array.dtype();
  const bool f32 = dtype == nb::dtype<float>(), f64 = dtype == nb::dtype<double>();
  if (!f32 && !f64) throw nb::type_error((std::string(what) + " has dtype " + dtype_name(dtype) + "; accepted: " + kAccepted).c_str());
  if (array.ndim() != 2 && array.ndim() != 3)
    throw nb::value_error((std::string(what) + " has " + std::to_string(array.ndim()) + " dimensions, shape " + shape_string(array) +
                           "; accepted: 2 (one rows x cols matrix) or 3 (a batch x rows x cols batch)")
                              .c_str());
  for (size_t i = 0; i < array.ndim(); ++i)
    if (array.shape(i) == 0) throw nb::value_error((std::string(what) + " has an empty dimension, shape " + shape_string(array)).c_str());
  if (!c_contiguous(array))
    throw nb::value_error((std::string(what) + " is not C-contiguous (shape " + shape_string(array) + ", strides " + strides_string(array) +
                           "); accepted: row-major contiguous memory: pass np.ascontiguousarray(x) or x.contiguous()")
                              .c_str());
  Matrices matrices;
  matrices.data = array.data();
  matrices.f64 = f64;
  matrices.ndim = array.ndim();
  const size_t first = array.ndim() - 2;
  matrices.batch = array.ndim() == 3 ? static_cast<int64_t>(array.shape(0)) : 1;
  matrices.rows = static_cast<int64_t>(array.shape(first));
  matrices.cols = static_cast<int64_t>(array.shape(first + 1));
  return matrices;
}

// "torch.Tensor (dtype=torch.int8, device=meta)": what an array that could not be read is.
std::string describe_object(nb::handle object) {
  std::string text = python_type_name(object);
  std::string details;
  for (const char* name : {"dtype", "device"})
    if (nb::hasattr(object, name)) details += (details.empty() ? "" : ", ") + std::string(name) + "=" + nb::cast<std::string>(nb::str(nb::getattr(object, name)));
  return details.empty() ? text : text + " (" + details + ")";
}

ReadArray as_input(nb::handle x) {
  ReadArray array;
  if (!nb::try_cast(x, array, false))
    throw nb::type_error(("x: expected a NumPy array or a torch.Tensor in cpu memory (" + std::string(kAccepted) + "), got " + describe_object(x)).c_str());
  return array;
}

bool is_torch(nb::handle object) {
  const std::string module = nb::cast<std::string>(nb::getattr(object.type(), "__module__", nb::str("")));
  return module == "torch" || module.rfind("torch.", 0) == 0;
}

// A new array of `like`'s kind (NumPy or torch), dtype and shape, and where to write it.
struct NewArray {
  nb::object object;
  void* data = nullptr;
};

template <typename T>
NewArray new_array(bool torch, const Matrices& shape) {
  T* data = new T[shape.count()];
  nb::capsule owner(data, [](void* pointer) noexcept { delete[] static_cast<T*>(pointer); });
  size_t dims[3];
  if (shape.ndim == 3) {
    dims[0] = static_cast<size_t>(shape.batch);
    dims[1] = static_cast<size_t>(shape.rows);
    dims[2] = static_cast<size_t>(shape.cols);
  } else {
    dims[0] = static_cast<size_t>(shape.rows);
    dims[1] = static_cast<size_t>(shape.cols);
  }
  NewArray result;
  result.data = data;
  if (torch) result.object = nb::cast(nb::ndarray<nb::pytorch, T>(data, shape.ndim, dims, owner));
  else result.object = nb::cast(nb::ndarray<nb::numpy, T>(data, shape.ndim, dims, owner));
  return result;
}

// ---- running -----------------------------------------------------------------------------

std::optional<ScalarType> parse_precision(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  auto type = parse_scalar_type(*text);
  if (!type) throw nb::value_error(("precision: unknown type '" + *text + "'; expected None (the program's own), 'bf16', 'f16', 'f32' or 'f64' (ref only)").c_str());
  return type;
}

runtime::OrthogonalizeOptions make_options(const std::string& strategy, const std::optional<std::string>& precision, const std::string& backend,
                                           int threads) {
  runtime::OrthogonalizeOptions options;
  options.strategy = strategy;
  runtime::parse_strategy_option(strategy);
  options.precision = parse_precision(precision);
  options.backend = backend;  // "auto": the runtime picks ref for f64 storage, else cpu
  options.threads = threads;
  return options;
}

std::string options_key(const runtime::OrthogonalizeOptions& options) {
  return options.strategy + "|" + (options.precision ? std::string(to_string(*options.precision)) : "-") + "|" + options.backend + "|" +
         options.cuda_variant + "|" + options.cpu_isa + "|" + options.cpu_kernel + "|" + std::to_string(options.threads);
}

// Compiled kernels by program, shape and options (the CPU executables and CUDA programs below
// are cached by the runtime too; this also skips the passes and the tuning-record lookup).
std::shared_ptr<runtime::CompiledOrthogonalizer> compiled_for(const ProgramObject& program, int64_t batch, int64_t rows, int64_t cols,
                                                              const runtime::OrthogonalizeOptions& options) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<runtime::CompiledOrthogonalizer>> cache;
  const std::string key = std::to_string(program.id) + "|" + std::to_string(batch) + "x" + std::to_string(rows) + "x" + std::to_string(cols) + "|" +
                          options_key(options);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto found = cache.find(key); found != cache.end()) return found->second;
  }
  auto compiled = runtime::compile_orthogonalizer(*program.program, batch, rows, cols, options);
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 64) cache.clear();
  cache.emplace(key, compiled);
  return compiled;
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* a0 = static_cast<const char*>(a);
  const auto* b0 = static_cast<const char*>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

// Runs `compiled` on `in` into `out` (same dtype and element count), without the GIL. f32 runs in
// place of the arrays; f64 goes through f32 buffers, except on the ref backend, which computes
// from the f64 values.
void execute(const runtime::CompiledOrthogonalizer& compiled, const Matrices& in, void* out) {
  const size_t count = in.count();
  nb::gil_scoped_release release;
  // A NaN or an infinity (or an f64 value beyond float32 for a backend that reads f32) is a
  // ValueError naming the element, not an all-NaN result (runtime/input_check.h).
  if (in.f64) runtime::require_finite_input(static_cast<const double*>(in.data), in.batch, in.rows, in.cols, compiled.backend() != "ref", "x");
  else runtime::require_finite_input(static_cast<const float*>(in.data), in.batch, in.rows, in.cols, "x");
  if (!in.f64) {
    const auto* input = static_cast<const float*>(in.data);
    std::vector<float> copy;
    if (overlaps(in.data, count * sizeof(float), out, count * sizeof(float))) {  // x and out share memory: read a copy
      copy.assign(input, input + count);
      input = copy.data();
    }
    compiled.run(input, static_cast<float*>(out));
    return;
  }
  const auto* input = static_cast<const double*>(in.data);
  if (compiled.backend() == "ref") {
    const std::vector<double> values = reference::interpret(compiled.function(), std::vector<double>(input, input + count));
    std::memcpy(out, values.data(), count * sizeof(double));
    return;
  }
  std::vector<float> narrow(input, input + count), result(count);
  compiled.run(narrow.data(), result.data());
  std::copy(result.begin(), result.end(), static_cast<double*>(out));
}

// Checks `out` against the input and returns where to write.
void* check_out(nb::handle out, const Matrices& in) {
  WriteArray array;
  if (!nb::try_cast(out, array, false)) {
    ReadArray read_only;
    if (nb::try_cast(out, read_only, false)) throw nb::value_error("out is read-only; pass a writable array");
    throw nb::type_error(("out: expected a NumPy array or a torch.Tensor in cpu memory, got " + describe_object(out)).c_str());
  }
  const Matrices matrices = inspect(array, "out");
  if (matrices.f64 != in.f64)
    throw nb::type_error(("out has dtype " + dtype_name(array.dtype()) + " but x is " + (in.f64 ? "float64" : "float32") + "; out must have x's dtype").c_str());
  if (matrices.ndim != in.ndim || matrices.batch != in.batch || matrices.rows != in.rows || matrices.cols != in.cols)
    throw nb::value_error(("out has shape " + shape_string(array) + "; it must have x's shape").c_str());
  return array.data();
}

nb::object run_into(const runtime::CompiledOrthogonalizer& compiled, nb::handle x, const Matrices& in, nb::handle out) {
  if (!out.is_none()) {
    void* target = check_out(out, in);
    execute(compiled, in, target);
    return nb::borrow(out);
  }
  NewArray result = in.f64 ? new_array<double>(is_torch(x), in) : new_array<float>(is_torch(x), in);
  execute(compiled, in, result.data);
  return result.object;
}

nb::object orthogonalize(nb::handle x, nb::handle program, const std::string& strategy, const std::optional<std::string>& precision,
                         const std::string& backend, nb::handle out, int threads) {
  const ProgramPtr loaded = resolve_program(program);
  const ReadArray array = as_input(x);
  const Matrices in = inspect(array, "x");
  const runtime::OrthogonalizeOptions options = make_options(strategy, precision, backend, threads);
  std::shared_ptr<runtime::CompiledOrthogonalizer> compiled;
  {
    nb::gil_scoped_release release;
    compiled = compiled_for(*loaded, in.batch, in.rows, in.cols, options);
  }
  return run_into(*compiled, x, in, out);
}

// ---- Compiled ------------------------------------------------------------------------------

struct CompiledObject {
  ProgramPtr program;
  std::shared_ptr<runtime::CompiledOrthogonalizer> compiled;
  int64_t batch = 1, rows = 0, cols = 0;

  nb::object call(nb::handle x, nb::handle out) const {
    const ReadArray array = as_input(x);
    const Matrices in = inspect(array, "x");
    if (in.batch != batch || in.rows != rows || in.cols != cols || (in.ndim == 2 && batch != 1))
      throw nb::value_error(("x has shape " + shape_string(array) + " but this kernel was compiled for " + shape_text()).c_str());
    return run_into(*compiled, x, in, out);
  }
  std::string shape_text() const {
    return batch == 1 ? "(" + std::to_string(rows) + ", " + std::to_string(cols) + ") (or (1, " + std::to_string(rows) + ", " + std::to_string(cols) + "))"
                      : "(" + std::to_string(batch) + ", " + std::to_string(rows) + ", " + std::to_string(cols) + ")";
  }
};

CompiledObject compile(nb::handle program, int64_t rows, int64_t cols, int64_t batch, const std::string& strategy,
                       const std::optional<std::string>& precision, const std::string& backend, int threads) {
  if (rows < 1 || cols < 1 || batch < 1)
    throw nb::value_error(("shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ") with batch " + std::to_string(batch) +
                           ": every size must be at least 1")
                              .c_str());
  CompiledObject object;
  object.program = resolve_program(program);
  object.batch = batch;
  object.rows = rows;
  object.cols = cols;
  const runtime::OrthogonalizeOptions options = make_options(strategy, precision, backend, threads);
  nb::gil_scoped_release release;
  object.compiled = compiled_for(*object.program, batch, rows, cols, options);
  return object;
}

// ---- structured results -------------------------------------------------------------------

autotune::ModelShapes load_model(const std::string& model, bool is_json, bool per_head) {
  autotune::ModelShapeOptions options;
  options.per_head = per_head;
  return is_json ? runtime::parse_model_matrices(model, "model_config (dict)", options) : runtime::load_model_matrices(model, options);
}

using ShapeArg = std::optional<std::tuple<int64_t, int64_t, int64_t>>;

std::vector<autotune::UniqueShape> shapes_for(const std::optional<std::string>& model, bool is_json, const ShapeArg& shape, bool per_head,
                                              std::vector<autotune::ModelMatrix>* adamw, std::string* title) {
  if (model.has_value() == shape.has_value()) throw nb::value_error("give exactly one of a model configuration or a shape");
  if (shape) {
    const auto [rows, cols, batch] = *shape;
    if (rows < 1 || cols < 1 || batch < 1) throw nb::value_error("shape: every size must be at least 1");
    if (title) *title = std::to_string(rows) + "x" + std::to_string(cols) + (batch > 1 ? "x" + std::to_string(batch) : "");
    return {runtime::single_tuning_shape({rows, cols, batch})};
  }
  const autotune::ModelShapes derived = load_model(*model, is_json, per_head);
  if (adamw)
    for (const auto& matrix : derived.matrices)
      if (!matrix.muon) adamw->push_back(matrix);
  if (title) *title = is_json ? std::string("model (dict)") : std::filesystem::path(*model).filename().string();
  return autotune::unique_muon_shapes(derived);
}

std::string tune(const std::optional<std::string>& model, bool model_is_json, const ShapeArg& shape, nb::handle program,
                 const std::optional<std::string>& precision, double budget, const std::string& backend, const std::optional<std::string>& out,
                 bool per_head, bool retune, int threads, bool verbose, nb::object progress, const std::optional<std::string>& restarts) {
  if (!(budget > 0)) throw nb::value_error(("budget must be a positive number of seconds (got " + std::to_string(budget) + ")").c_str());
  if (threads < 0) throw nb::value_error("threads must be 0 (all cores) or positive");
  const ProgramPtr loaded = resolve_program(program);
  runtime::TuneRequest request;
  request.program = loaded->program.get();
  request.precision = runtime::parse_tuning_precision(precision);
  request.budget = budget;
  // The backend's name parsed once, here; the tuner receives the enum.
  const auto parsed_backend = autotune::parse_tune_backend(backend);
  if (!parsed_backend) throw nb::value_error(("unknown backend '" + backend + "'; expected 'cpu' or 'cuda'").c_str());
  request.backend = *parsed_backend;
  request.out = out;
  request.retune = retune;
  request.threads = threads;
  if (restarts) {
    try {
      request.restarts = autotune::parse_restart_request(*restarts, static_cast<int>(loaded->program->steps.size()));
    } catch (const std::invalid_argument& error) {
      throw nb::value_error(("restarts: " + std::string(error.what()) + " (" + loaded->program->name + " has " +
                             std::to_string(loaded->program->steps.size()) + " steps)").c_str());
    }
  }
  // progress(shape, shapes, text, candidate, candidates, phase, label), called with the GIL taken
  // (the tuning runs without it). An exception it raises stops the tuning and reaches the caller
  // (Ctrl-C lands in the callback as KeyboardInterrupt; a callback with the wrong signature fails
  // at once): it travels through the tuner as ProgressRaised, which is not a std::exception, so
  // no candidate's catch takes it for that candidate's failure. The shapes finished before it
  // are in the records file already.
  struct ProgressRaised {};
  auto raised = std::make_shared<std::optional<nb::python_error>>();
  if (!progress.is_none())
    request.on_progress = [progress, raised](size_t index, size_t count, const std::string& text, const autotune::TuneProgress& p) {
      nb::gil_scoped_acquire gil;
      try {
        progress(index, count, text, p.candidate, p.candidates, p.phase, p.label);
      } catch (nb::python_error& error) {
        raised->emplace(std::move(error));
        throw ProgressRaised{};
      }
    };
  std::vector<autotune::ModelMatrix> adamw;
  request.shapes = shapes_for(model, model_is_json, shape, per_head, &adamw, nullptr);
  nlohmann::json result;
  try {
    nb::gil_scoped_release release;
    const runtime::TuneTarget target = runtime::prepare_tuning(request);
    const runtime::TuneOutcome outcome = runtime::run_tuning(request, target, verbose);
    nlohmann::json shapes = outcome.shapes;
    for (size_t i = 0; i < shapes.size(); ++i) {
      shapes[i]["key"] = outcome.keys[i];
      shapes[i]["entry"] = outcome.entries[i];
    }
    nlohmann::json not_tuned = nlohmann::json::array();
    for (const auto& matrix : adamw)
      not_tuned.push_back({{"name", matrix.name}, {"rows", matrix.rows}, {"cols", matrix.cols}, {"count", matrix.count}});
    result = {{"records", target.path}, {"elapsed_s", outcome.elapsed_s}, {"program", loaded->program->name}, {"backend", backend},
              {"device", target.fingerprint.to_json()}, {"shapes", shapes}, {"adamw", not_tuned}, {"restarts", outcome.restarts}};
    if (!target.existing.warning.empty()) result["warning"] = target.existing.warning;
  } catch (const ProgressRaised&) {
    nb::python_error error = std::move(**raised);
    raised->reset();
    throw error;
  }
  return result.dump();
}

std::string bench(nb::handle program, int64_t rows, int64_t cols, int64_t batch, const std::string& backend, const std::string& strategy,
                  const std::optional<std::string>& precision, int repeat, int threads, const std::string& isa, const std::string& variant,
                  const std::string& kernel) {
  if (rows < 1 || cols < 1 || batch < 1) throw nb::value_error("shape: every size must be at least 1");
  if (repeat < 1) throw nb::value_error(("repeat must be at least 1 (got " + std::to_string(repeat) + ")").c_str());
  const ProgramPtr loaded = resolve_program(program);
  runtime::BenchRequest request;
  request.program = loaded->program.get();
  request.shape = {rows, cols, batch};
  request.options = make_options(strategy, precision, backend, threads);
  request.options.cpu_isa = isa;
  request.options.cpu_kernel = kernel;
  if (!variant.empty() && request.options.backend != "cuda") throw nb::value_error("variant is an option of backend='cuda'");
  request.options.cuda_variant = variant;
  request.repeat = repeat;
  nb::gil_scoped_release release;
  return runtime::bench_record(request, false).dump();
}

std::string bench_model(const std::optional<std::string>& model, bool model_is_json, const ShapeArg& shape, nb::handle program,
                        const std::optional<std::string>& precision, double budget, int threads, bool per_head) {
  if (!(budget > 0)) throw nb::value_error(("budget must be a positive number of seconds (got " + std::to_string(budget) + ")").c_str());
  const ProgramPtr loaded = resolve_program(program);
  runtime::CompareRequest request;
  request.program = loaded->program.get();
  request.shapes = shapes_for(model, model_is_json, shape, per_head, nullptr, &request.title);
  request.precision = runtime::parse_tuning_precision(precision);
  request.budget = budget;
  request.threads = threads;
  nb::gil_scoped_release release;
  return runtime::compare_record(request, nullptr, false).dump();
}

}  // namespace

void register_compiler(nb::module_& module) {
  // Every C++ exception that reaches Python, by the runtime's one classification
  // (runtime/errors.h): nanobind's own (nb::value_error, a Python error raised in a callback)
  // never get here, it handles them first.
  nb::register_exception_translator([](const std::exception_ptr& pointer, void*) {
    const runtime::ClassifiedError error = runtime::classify_exception(pointer);
    PyErr_SetString(python_exception_of(error.kind), error.message.c_str());
  });

  nb::class_<ProgramObject>(module, "Program", "An orthogonalizer program (shipped, from a .oj file, or from DSL source); see orthojit.load_program.")
      .def_prop_ro("name", [](const ProgramObject& p) { return p.program->name; })
      .def_prop_ro("origin", [](const ProgramObject& p) { return p.origin; }, "'shipped', 'file' or 'source'")
      .def_prop_ro("where", [](const ProgramObject& p) { return p.where; }, "the shipped name, the file path, or '<string>'")
      .def_prop_ro("storage", [](const ProgramObject& p) { return std::string(to_string(p.program->policy.storage)); })
      .def_prop_ro("accumulate", [](const ProgramObject& p) { return std::string(to_string(p.program->policy.accumulate)); })
      .def_prop_ro("norm", [](const ProgramObject& p) { return std::string(to_string(p.program->policy.norm)); })
      .def_prop_ro("steps", [](const ProgramObject& p) { return p.program->steps.size(); }, "the number of iterations")
      .def_prop_ro("coefficients",
                   [](const ProgramObject& p) {
                     std::vector<std::tuple<double, double, double>> triples;
                     for (const auto& step : p.program->steps) triples.emplace_back(step.a, step.b, step.c);
                     return triples;
                   },
                   "one (a, b, c) per step, safety scaling applied")
      .def_prop_ro("coefficient_set", [](const ProgramObject& p) { return p.program->coefficient_set; })
      .def_prop_ro("safety", [](const ProgramObject& p) { return p.program->coefficient_safety; })
      .def_prop_ro("normalization",
                   [](const ProgramObject& p) {
                     const auto& n = p.program->normalization;
                     return std::make_tuple(n.safety, n.eps, std::string(n.mode == dsl::Normalization::Mode::Add ? "add" : "clamp"));
                   },
                   "(safety, eps, mode): X / (|X|_F * safety + eps) for 'add', X / max(|X|_F * safety, eps) for 'clamp'")
      .def_prop_ro("gram_restarts", [](const ProgramObject& p) { return p.program->gram_restarts; })
      .def("__repr__", [](const ProgramObject& p) {
        return "orthojit.Program('" + p.program->name + "', storage=" + std::string(to_string(p.program->policy.storage)) +
               ", steps=" + std::to_string(p.program->steps.size()) + ", from " + p.origin + (p.origin == "source" ? "" : " " + p.where) + ")";
      });

  module.def("load_program", &load_program_text, nb::arg("path_or_source"),
             "A shipped program name, a path to a .oj file, or DSL source text -> Program. DSL errors raise ValueError(file:line:col: error: ...).");

  module.def("orthogonalize", &orthogonalize, nb::arg("x"), nb::arg("program") = "jordan_ns5", nb::arg("strategy") = "auto",
             nb::arg("precision").none() = nb::none(), nb::arg("backend") = "auto", nb::arg("out").none() = nb::none(), nb::arg("threads") = 0,
             "Orthogonalizes a float32/float64 matrix (2-D) or batch (3-D) in host memory; returns a new array of x's kind, or writes into out.");

  nb::class_<CompiledObject>(module, "Compiled", "A program compiled for one shape and backend; call it on arrays of that shape.")
      .def("__call__", &CompiledObject::call, nb::arg("x"), nb::arg("out").none() = nb::none())
      .def_prop_ro("program", [](const CompiledObject& c) { return c.program; })
      .def_prop_ro("shape", [](const CompiledObject& c) { return std::make_tuple(c.rows, c.cols); })
      .def_prop_ro("batch", [](const CompiledObject& c) { return c.batch; })
      .def_prop_ro("strategy", [](const CompiledObject& c) { return std::string(ir::to_string(c.compiled->strategy())); })
      .def_prop_ro("strategy_reason", [](const CompiledObject& c) { return c.compiled->strategy_reason(); })
      .def_prop_ro("backend", [](const CompiledObject& c) { return c.compiled->backend(); })
      .def_prop_ro("target", [](const CompiledObject& c) { return c.compiled->describe_target(); })
      .def_prop_ro("storage", [](const CompiledObject& c) { return std::string(to_string(c.compiled->function().policy.storage)); })
      .def_prop_ro("jit_seconds", [](const CompiledObject& c) { return c.compiled->jit_seconds(); })
      .def_prop_ro("ir", [](const CompiledObject& c) { return ir::print_function(c.compiled->function()); }, "the scheduled IR, as `compile --emit ir` prints it")
      .def("__repr__", [](const CompiledObject& c) {
        return "orthojit.Compiled('" + c.program->program->name + "', shape=" + c.shape_text() + ", strategy=" + ir::to_string(c.compiled->strategy()) +
               ", target='" + c.compiled->describe_target() + "')";
      });

  module.def("compile", &compile, nb::arg("program"), nb::arg("rows"), nb::arg("cols"), nb::arg("batch") = 1, nb::arg("strategy") = "auto",
             nb::arg("precision").none() = nb::none(), nb::arg("backend") = "auto", nb::arg("threads") = 0,
             "Compiles a program for batch x rows x cols; returns a Compiled kernel.");

  module.def("tune", &tune, nb::arg("model").none(), nb::arg("model_is_json"), nb::arg("shape").none(), nb::arg("program"),
             nb::arg("precision").none(), nb::arg("budget"), nb::arg("backend"), nb::arg("out").none(), nb::arg("per_head"), nb::arg("retune"),
             nb::arg("threads"), nb::arg("verbose"), nb::arg("progress") = nb::none(), nb::arg("restarts") = nb::none(),
             "`orthojit tune`: tunes each shape and merges the records into the file; returns JSON text. progress(shape, shapes, text, candidate, "
             "candidates, phase, label) is called as it goes.");
  module.def("bench", &bench, nb::arg("program"), nb::arg("rows"), nb::arg("cols"), nb::arg("batch"), nb::arg("backend"), nb::arg("strategy"),
             nb::arg("precision").none(), nb::arg("repeat"), nb::arg("threads"), nb::arg("isa"), nb::arg("variant"),
             nb::arg("kernel") = "", "`orthojit bench --json`: times one program on one shape; returns JSON text.");
  module.def("bench_model", &bench_model, nb::arg("model").none(), nb::arg("model_is_json"), nb::arg("shape").none(), nb::arg("program"),
             nb::arg("precision").none(), nb::arg("budget"), nb::arg("threads"), nb::arg("per_head"),
             "`orthojit bench --model/--compare --json`: standard vs gram vs OpenBLAS per shape; returns JSON text.");
  module.def("info", [] { return runtime::info_record().dump(); }, "`orthojit info` as JSON text.");
  module.def("_openblas_coretype_for_host", &cpu::openblas_coretype_for_host,
             "The OPENBLAS_CORETYPE orthojit chooses for this CPU (\"\": OpenBLAS's own choice is as good); orthojit/openblas_before_torch.py.");
}

}  // namespace orthojit::python
