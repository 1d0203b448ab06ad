// The C API (include/orthojit/orthojit.h) over the C++ runtime. Every entry point runs its body
// inside `guarded`, which turns every exception into a status and the thread's last-error message:
// nothing C++ crosses the boundary.
#include "orthojit/orthojit.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ios>
#include <limits>
#include <type_traits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/build_status.h"
#include "kernels/program_library.h"
#include "runtime/input_check.h"
#include "runtime/muon/deepspeed_config.h"
#include "runtime/muon/device_optimizer.h"
#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/memory_space.h"
#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/parameter.h"
#include "runtime/muon/parameter_tagging.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/build_parts.h"
#include "runtime/c_api_optimizer.h"
#include "runtime/errors.h"
#include "runtime/npy_file.h"
#include "runtime/orthogonalize.h"
#include "support/source_location.h"
#ifdef ORTHOJIT_HAVE_MPI
#include "runtime/zero/mpi_communicator.h"
#endif
#ifdef ORTHOJIT_HAVE_NCCL
#include "runtime/zero/nccl_communicator.h"
#endif

#ifndef ORTHOJIT_VERSION
#define ORTHOJIT_VERSION "unknown"
#endif

namespace rt = orthojit::runtime;

struct oj_optimizer {
  rt::OptimizerSettings settings;
  std::vector<rt::Parameter> parameters;  // everything added, in order (kept after build for the info)
  // Where data, gradients and state live: host memory (stepped by oj_optimizer_step) or CUDA
  // memory (stepped by oj_optimizer_step_on_stream); set by the "memory" option.
  bool cuda_memory = false;
  // ZeRO data parallelism: the communicator given by oj_optimizer_distribute_* (null: one rank)
  // and the zero.* settings.
  std::shared_ptr<rt::Communicator> communicator;
  rt::DistributedSettings distributed = [] {
    rt::DistributedSettings defaults;
    defaults.stage = 2;  // as orthojit.DistributedMuon's
    return defaults;
  }();
  std::unique_ptr<rt::CApiOptimizer> built;  // null while collecting
  std::vector<rt::ParameterInfo> infos;      // of `built`, in its order
  std::string skip_reason, description;
  oj_progress_fn progress = nullptr;  // oj_optimizer_set_progress
  void* progress_user_data = nullptr;
};

namespace {

thread_local std::string t_last_error;
thread_local bool t_last_error_lost = false;  // the message could not be stored (out of memory)

oj_status fail(oj_status status, const char* function, const char* message) noexcept {
  try {
    t_last_error = std::string(function) + ": " + message;
    t_last_error_lost = false;
  } catch (...) {
    t_last_error_lost = true;
  }
  return status;
}

// The C status of each error kind (runtime/errors.h); the numbers are the ABI's and never change.
oj_status status_of(rt::ErrorKind kind) {
  switch (kind) {
    case rt::ErrorKind::BadInput: return OJ_INVALID_ARGUMENT;
    case rt::ErrorKind::Unavailable: return OJ_UNAVAILABLE;
    case rt::ErrorKind::Io: return OJ_IO_ERROR;
    case rt::ErrorKind::InvalidState: return OJ_INVALID_STATE;
    case rt::ErrorKind::OutOfMemory: return OJ_OUT_OF_MEMORY;
    case rt::ErrorKind::Internal: return OJ_INTERNAL;
  }
  return OJ_INTERNAL;
}

// Runs `body` (which returns OJ_OK or throws) and turns what it throws into a status by the
// runtime's one classification; `plain_runtime_error` is what an untyped std::runtime_error means
// for this entry point (a state file that does not match for save/load, else a bug).
template <class Body>
oj_status guarded(const char* function, Body&& body, rt::ErrorKind plain_runtime_error = rt::ErrorKind::Internal) noexcept {
  try {
    return body();
  } catch (...) {
    try {
      const rt::ClassifiedError error = rt::classify_exception(std::current_exception(), plain_runtime_error);
      return fail(status_of(error.kind), function, error.message.c_str());
    } catch (...) {  // the message could not be copied
      return fail(OJ_OUT_OF_MEMORY, function, "out of memory");
    }
  }
}

void require(const void* pointer, const char* what) {
  if (!pointer) throw rt::UsageError(std::string(what) + " is NULL");
}

std::string require_string(const char* text, const char* what) {
  require(text, what);
  if (!*text) throw rt::UsageError(std::string(what) + " is empty");
  return text;
}

// A C caller may pass any int as an enum argument, but in C++ reading an enum object whose value
// lies outside its enumerators' range is undefined (UBSan: "load of value 7, which is not a valid
// value for type 'oj_dtype'", found by make test-sanitize): the value is read from the object's
// bytes instead, and then checked.
template <class Enum>
int enum_value(const Enum& value) {
  std::underlying_type_t<Enum> bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<int>(bits);
}

rt::DType to_dtype(const oj_dtype& dtype_argument, const char* what) {
  const int dtype = enum_value(dtype_argument);
  switch (dtype) {
    case OJ_DTYPE_F32: return rt::DType::F32;
    case OJ_DTYPE_BF16: return rt::DType::BF16;
    case OJ_DTYPE_F16: return rt::DType::F16;
    default: break;
  }
  throw rt::UsageError(std::string(what) + ": " + std::to_string(dtype) +
                                     " is not an oj_dtype (OJ_DTYPE_F32 = 0, OJ_DTYPE_BF16 = 1, OJ_DTYPE_F16 = 2)");
}

rt::MatrixLayout to_layout(const oj_layout& layout_argument) {
  const int layout = enum_value(layout_argument);
  switch (layout) {
    case OJ_LAYOUT_AUTO: return rt::MatrixLayout::Auto;
    case OJ_LAYOUT_FLATTEN: return rt::MatrixLayout::Flatten;
    case OJ_LAYOUT_BATCH: return rt::MatrixLayout::Batch;
    case OJ_LAYOUT_TRAILING: return rt::MatrixLayout::Trailing;
    default: break;
  }
  throw rt::UsageError("layout: " + std::to_string(layout) +
                                     " is not an oj_layout (OJ_LAYOUT_AUTO = 0, OJ_LAYOUT_FLATTEN = 1, OJ_LAYOUT_BATCH = 2, OJ_LAYOUT_TRAILING = 3)");
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// OJ_UNAVAILABLE for a known backend this build or machine cannot run (the runtime reports an
// unknown name itself, as a usage error).
void check_backend_available(const std::string& backend) {
  if (backend == "auto") return;  // resolved per program to one that runs its storage (ref or cpu)
  const std::vector<std::string> available = rt::available_backends();
  for (const auto& name : available)
    if (name == backend) return;
  if (backend == "cuda") throw rt::UnavailableError("backend 'cuda' cannot run here: " + rt::cuda_backend_unavailable_reason() + "; available: " + join(available));
  if (backend == "cpu") throw rt::UnavailableError("backend 'cpu' cannot run here: " + orthojit::cpu::cpu_backend_unavailable_reason() + "; available: " + join(available));
  if (backend == "ref") throw rt::UnavailableError("backend '" + backend + "' is not available in this build; available: " + join(available));
  throw rt::UsageError("unknown backend '" + backend + "'; backends: auto, ref, cpu, cuda (available here: " + join(available) + ")");
}

void check_handle(const oj_optimizer* optimizer) { require(optimizer, "optimizer"); }

rt::Parameter* find_parameter(oj_optimizer* optimizer, const std::string& name) {
  for (auto& parameter : optimizer->parameters)
    if (parameter.name == name) return &parameter;
  return nullptr;
}

rt::Parameter& require_parameter(oj_optimizer* optimizer, const char* name) {
  const std::string text = require_string(name, "name");
  if (rt::Parameter* parameter = find_parameter(optimizer, text)) return *parameter;
  throw rt::UsageError("no parameter named '" + text + "' was added");
}

bool is_built(const oj_optimizer* optimizer) { return optimizer->built != nullptr; }

const rt::OptimizerSettings& built_settings(const oj_optimizer* optimizer) { return optimizer->built->settings(); }

// OJ_UNAVAILABLE, with the reason, when device memory cannot be used here.
void check_cuda_memory_available() {
  const std::string why = rt::cuda_backend_unavailable_reason();
  if (!why.empty())
    throw rt::UnavailableError("memory = cuda needs the cuda backend, which cannot run here: " + why + "; available backends: " + join(rt::available_backends()));
}

void require_collecting(const oj_optimizer* optimizer, const std::string& what) {
  if (is_built(optimizer)) throw rt::InvalidStateError(what + " is only possible before the optimizer is built (oj_optimizer_build or the first step)");
}

// OJ_UNAVAILABLE when this machine cannot run what the optimizer needs.
void check_machine(const oj_optimizer* optimizer) {
  if (optimizer->cuda_memory) {
    // Every Muon step runs on the cuda backend whatever muon.backend says.
    check_cuda_memory_available();
    return;
  }
  bool any_muon = false;
  for (const auto& parameter : optimizer->parameters)
    if (parameter.requires_grad && parameter.use_muon.value_or(rt::default_use_muon(parameter.name, parameter.shape, optimizer->settings.tagging)))
      any_muon = true;
  if (any_muon) check_backend_available(optimizer->settings.muon.backend);
}

void build(oj_optimizer* optimizer) {
  if (is_built(optimizer)) return;
  if (!optimizer->communicator) {
    check_machine(optimizer);
  } else {
    // Building is collective: a rank whose machine cannot run it must not leave the others
    // waiting in the optimizer's first collective. One scalar all-reduce shares the failure.
    std::exception_ptr failure;
    try {
      check_machine(optimizer);
    } catch (...) {
      failure = std::current_exception();
    }
    float failed = failure ? 1.0f : 0.0f;
    optimizer->communicator->all_reduce_sum(&failed, 1);
    if (failure) std::rethrow_exception(failure);
    if (failed > 0)
      throw rt::UnavailableError(std::to_string(static_cast<int>(failed)) + " other rank(s) cannot run this optimizer (each says why in its own "
                                 "error); this rank stopped with them and nothing was built");
  }
  auto built = optimizer->communicator
                   ? rt::distributed_optimizer(optimizer->parameters, optimizer->settings, optimizer->cuda_memory, optimizer->distributed, optimizer->communicator)
                   : rt::single_rank_optimizer(optimizer->parameters, optimizer->settings, optimizer->cuda_memory);
  optimizer->infos = built->parameters();
  optimizer->built = std::move(built);
}

// Why a distributed optimizer cannot take the communicator yet: it is built, or has one.
void require_distributable(const oj_optimizer* optimizer) {
  require_collecting(optimizer, "distributing the optimizer");
  if (optimizer->communicator)
    throw rt::InvalidStateError("this optimizer is already distributed over " + optimizer->communicator->describe() + "; create another handle for another communicator");
}

// rt::apply_setting, with the C API's own key named where the runtime lists the valid ones.
void apply_c_setting(rt::OptimizerSettings& settings, const std::string& key, const std::string& value) {
  try {
    rt::apply_setting(settings, key, value);
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    if (message.rfind("unknown optimizer setting", 0) == 0)
      throw rt::UsageError(message + ", memory (host | cuda), and the zero.* keys of a distributed optimizer (zero.stage, ...)");
    throw;
  }
}

void fill_report(const oj_optimizer* optimizer, const rt::StepReport& result, oj_step_report* report) {
  if (!report) return;
  report->skipped = result.skipped ? 1 : 0;
  report->muon_updated = result.muon_updated;
  report->adam_updated = result.adam_updated;
  report->without_gradient = result.without_gradient;
  report->orthogonalize_seconds = result.orthogonalize_seconds;
  report->steps_taken = optimizer->built->steps_taken();
}

void check_learning_rate(double lr, const char* what) {
  if (!std::isfinite(lr) || lr < 0) throw rt::UsageError(std::string(what) + " must be finite and >= 0 (got " + std::to_string(lr) + ")");
}

}  // namespace

extern "C" {

const char* oj_last_error(void) {
  if (t_last_error_lost) return "out of memory (the error message could not be stored)";
  return t_last_error.c_str();
}

const char* oj_status_name(oj_status status) {
  switch (static_cast<int>(status)) {
    case OJ_OK: return "OJ_OK";
    case OJ_INVALID_ARGUMENT: return "OJ_INVALID_ARGUMENT";
    case OJ_UNAVAILABLE: return "OJ_UNAVAILABLE";
    case OJ_IO_ERROR: return "OJ_IO_ERROR";
    case OJ_INVALID_STATE: return "OJ_INVALID_STATE";
    case OJ_OUT_OF_MEMORY: return "OJ_OUT_OF_MEMORY";
    case OJ_INTERNAL: return "OJ_INTERNAL";
    default: return "OJ_UNKNOWN_STATUS";
  }
}

const char* oj_version(void) { return ORTHOJIT_VERSION; }

int oj_api_version(void) { return OJ_API_VERSION; }

const char* oj_available_backends(void) {
  static const std::string names = [] {
    try {
      std::string text;
      for (const auto& name : rt::available_backends()) text += (text.empty() ? "" : ",") + name;
      return text;
    } catch (...) {
      return std::string("ref,cpu");
    }
  }();
  return names.c_str();
}

oj_status oj_optimizer_create(const char* preset, oj_optimizer** out) {
  return guarded("oj_optimizer_create", [&] {
    const std::string name = require_string(preset, "preset");
    require(out, "out");
    auto optimizer = std::make_unique<oj_optimizer>();
    optimizer->settings = rt::preset_settings(name);  // std::invalid_argument naming the presets
    *out = optimizer.release();
    return OJ_OK;
  });
}

oj_status oj_optimizer_create_from_deepspeed_config(const char* path, oj_optimizer** out) {
  return guarded(
      "oj_optimizer_create_from_deepspeed_config",
      [&]() -> oj_status {
        const std::string file = require_string(path, "path");
        require(out, "out");
        if (!std::ifstream(file)) throw rt::FileError("cannot read " + file + ": " + std::strerror(errno));
        // A directory opens as a stream on Linux and reads as nothing ("not valid JSON").
        if (std::error_code ignored; std::filesystem::is_directory(file, ignored)) throw rt::FileError("cannot read " + file + ": it is a directory");
        auto optimizer = std::make_unique<oj_optimizer>();
        const rt::DeepSpeedConfig config = rt::load_deepspeed_config(file);
        // DeepSpeed ignores keys it does not know; so does this reader, saying which.
        for (const rt::IgnoredKey& key : config.ignored_keys)
          std::fprintf(stderr, "orthojit: warning: %s: ignored unknown key %s (DeepSpeed ignores it too); valid keys there: %s\n", file.c_str(),
                       key.path.c_str(), key.valid_keys.c_str());
        optimizer->settings = config.optimizer;
        if (config.zero.stage >= 1) {  // stage 0 or no section: the zero.* defaults
          try {
            optimizer->distributed = rt::distributed_settings(config);
          } catch (const std::invalid_argument& error) {
            std::fprintf(stderr, "orthojit: warning: %s: zero_optimization does not configure the distributed optimizer (%s); the zero.* options keep their defaults\n",
                         file.c_str(), error.what());
          }
        }
        *out = optimizer.release();
        return OJ_OK;
      },
      rt::ErrorKind::Io);
}

void oj_optimizer_destroy(oj_optimizer* optimizer) { delete optimizer; }

oj_status oj_optimizer_set_option(oj_optimizer* optimizer, const char* key, const char* value) {
  return guarded("oj_optimizer_set_option", [&] {
    check_handle(optimizer);
    const std::string name = require_string(key, "key");
    require(value, "value");
    if (name == "memory") {
      const std::string where = value;
      if (where != "host" && where != "cuda") throw rt::UsageError("memory '" + where + "': expected host or cuda");
      require_collecting(optimizer, "setting 'memory'");
      if (where == "cuda") check_cuda_memory_available();
      optimizer->cuda_memory = where == "cuda";
      return OJ_OK;
    }
    if (name.rfind("zero.", 0) == 0) {
      rt::DistributedSettings changed = optimizer->distributed;
      rt::apply_distributed_setting(changed, name.substr(5), value);  // validates key and value first
      require_collecting(optimizer, "setting '" + name + "'");
      optimizer->distributed = changed;
      return OJ_OK;
    }
    if (!is_built(optimizer)) {
      apply_c_setting(optimizer->settings, name, value);
      return OJ_OK;
    }
    rt::OptimizerSettings changed = built_settings(optimizer);
    apply_c_setting(changed, name, value);  // validates key and value first
    if (name != "muon.lr" && name != "adam.lr")
      throw rt::InvalidStateError("'" + name + "' cannot change after the optimizer is built; only muon.lr and adam.lr can");
    optimizer->built->set_learning_rates(changed.muon.lr, changed.adam.lr);
    optimizer->settings = changed;
    return OJ_OK;
  });
}

oj_status oj_optimizer_describe(oj_optimizer* optimizer, const char** out) {
  return guarded("oj_optimizer_describe", [&] {
    check_handle(optimizer);
    require(out, "out");
    optimizer->description = rt::describe(is_built(optimizer) ? built_settings(optimizer) : optimizer->settings);
    if (!optimizer->description.empty() && optimizer->description.back() != '\n') optimizer->description += '\n';
    optimizer->description += std::string("memory = ") + (optimizer->cuda_memory ? "cuda" : "host") + "\n";
    if (optimizer->communicator)
      optimizer->description += "communicator = " + optimizer->communicator->describe() + "\n" + rt::describe_distributed(optimizer->distributed);
    *out = optimizer->description.c_str();
    return OJ_OK;
  });
}

oj_status oj_optimizer_add_parameter(oj_optimizer* optimizer, const char* name, int32_t ndim, const int64_t* shape, oj_dtype dtype, void* data,
                                     oj_dtype grad_dtype, const void* grad, oj_tag tag) {
  return guarded("oj_optimizer_add_parameter", [&] {
    check_handle(optimizer);
    rt::Parameter parameter;
    parameter.name = require_string(name, "name");
    require_collecting(optimizer, "adding a parameter ('" + parameter.name + "')");
    if (find_parameter(optimizer, parameter.name)) throw rt::UsageError("parameter '" + parameter.name + "' was already added");
    if (ndim < 1 || ndim > 16) throw rt::UsageError("parameter '" + parameter.name + "': ndim " + std::to_string(ndim) + " is not in 1..16");
    require(shape, "shape");
    int64_t elements = 1;
    for (int32_t d = 0; d < ndim; ++d) {
      if (shape[d] <= 0) throw rt::UsageError("parameter '" + parameter.name + "': dimension " + std::to_string(d) + " is " + std::to_string(shape[d]) + "; every dimension must be > 0");
      if (elements > std::numeric_limits<int64_t>::max() / shape[d]) throw rt::UsageError("parameter '" + parameter.name + "': the shape's element count overflows");
      elements *= shape[d];
      parameter.shape.push_back(shape[d]);
    }
    parameter.dtype = to_dtype(dtype, "dtype");
    parameter.grad_dtype = to_dtype(grad_dtype, "grad_dtype");
    require(data, "data");
    parameter.data = data;
    parameter.grad = grad;
    switch (enum_value(tag)) {
      case OJ_TAG_AUTO: break;
      case OJ_TAG_MUON:
        if (ndim < 2)
          throw rt::UsageError("parameter '" + parameter.name + "' is tagged OJ_TAG_MUON but has " + std::to_string(ndim) +
                                             " dimension; Muon needs a matrix (ndim >= 2); tag it OJ_TAG_ADAMW or OJ_TAG_AUTO");
        parameter.use_muon = true;
        break;
      case OJ_TAG_ADAMW: parameter.use_muon = false; break;
      case OJ_TAG_FROZEN: parameter.requires_grad = false; break;
      default:
        throw rt::UsageError("tag: " + std::to_string(enum_value(tag)) +
                                           " is not an oj_tag (OJ_TAG_AUTO = 0, OJ_TAG_MUON = 1, OJ_TAG_ADAMW = 2, OJ_TAG_FROZEN = 3)");
    }
    optimizer->parameters.push_back(std::move(parameter));
    return OJ_OK;
  });
}

oj_status oj_optimizer_set_parameter_split(oj_optimizer* optimizer, const char* name, oj_layout layout, int32_t n_row_splits, const int64_t* row_splits,
                                           int64_t head_rows) {
  return guarded("oj_optimizer_set_parameter_split", [&] {
    check_handle(optimizer);
    rt::Parameter& parameter = require_parameter(optimizer, name);
    require_collecting(optimizer, "changing a parameter's split");
    const rt::MatrixLayout matrix_layout = to_layout(layout);
    if (n_row_splits < 0) throw rt::UsageError("n_row_splits must be >= 0 (got " + std::to_string(n_row_splits) + ")");
    if (n_row_splits > 0) require(row_splits, "row_splits");
    if (head_rows < 0) throw rt::UsageError("head_rows must be >= 0 (got " + std::to_string(head_rows) + ")");
    std::vector<int64_t> splits;
    for (int32_t i = 0; i < n_row_splits; ++i) {
      if (row_splits[i] <= 0) throw rt::UsageError("row_splits[" + std::to_string(i) + "] is " + std::to_string(row_splits[i]) + "; every block must have rows");
      splits.push_back(row_splits[i]);
    }
    parameter.layout = matrix_layout;
    parameter.row_splits = std::move(splits);
    parameter.head_rows = head_rows;
    return OJ_OK;
  });
}

oj_status oj_optimizer_build(oj_optimizer* optimizer) {
  return guarded("oj_optimizer_build", [&] {
    check_handle(optimizer);
    build(optimizer);
    return OJ_OK;
  });
}

oj_status oj_optimizer_set_gradient(oj_optimizer* optimizer, const char* name, const void* grad, oj_dtype grad_dtype) {
  return guarded("oj_optimizer_set_gradient", [&] {
    check_handle(optimizer);
    rt::Parameter& parameter = require_parameter(optimizer, name);
    const rt::DType type = to_dtype(grad_dtype, "grad_dtype");
    if (optimizer->built && parameter.requires_grad) optimizer->built->set_gradient(parameter.name, grad, type);
    parameter.grad = grad;
    parameter.grad_dtype = type;
    return OJ_OK;
  });
}

oj_status oj_optimizer_set_data(oj_optimizer* optimizer, const char* name, void* data) {
  return guarded("oj_optimizer_set_data", [&] {
    check_handle(optimizer);
    rt::Parameter& parameter = require_parameter(optimizer, name);
    require(data, "data");
    if (optimizer->built && parameter.requires_grad) optimizer->built->set_data(parameter.name, data);
    parameter.data = data;
    return OJ_OK;
  });
}

oj_status oj_optimizer_step(oj_optimizer* optimizer, oj_step_report* report) {
  return guarded("oj_optimizer_step", [&] {
    check_handle(optimizer);
    if (optimizer->cuda_memory)
      throw rt::InvalidStateError("this optimizer's memory is cuda (its data and gradients are device pointers): use oj_optimizer_step_on_stream");
    build(optimizer);
    optimizer->skip_reason.clear();
    const rt::StepReport result = optimizer->built->step(nullptr);
    if (result.skipped) optimizer->skip_reason = result.reason;
    fill_report(optimizer, result, report);
    return OJ_OK;
  });
}

oj_status oj_optimizer_step_on_stream(oj_optimizer* optimizer, void* stream, oj_step_report* report) {
  return guarded("oj_optimizer_step_on_stream", [&] {
    check_handle(optimizer);
    if (!optimizer->cuda_memory)
      throw rt::InvalidStateError("this optimizer's memory is host (the default; set the option memory = cuda before build for device pointers): use oj_optimizer_step");
    build(optimizer);
    optimizer->skip_reason.clear();
    const rt::StepReport result = optimizer->built->step(stream);
    if (result.skipped) optimizer->skip_reason = result.reason;
    fill_report(optimizer, result, report);
    return OJ_OK;
  });
}

const char* oj_optimizer_skip_reason(const oj_optimizer* optimizer) { return optimizer ? optimizer->skip_reason.c_str() : ""; }

oj_status oj_optimizer_set_learning_rates(oj_optimizer* optimizer, double muon_lr, double adam_lr) {
  return guarded("oj_optimizer_set_learning_rates", [&] {
    check_handle(optimizer);
    check_learning_rate(muon_lr, "muon_lr");
    check_learning_rate(adam_lr, "adam_lr");
    if (optimizer->built) optimizer->built->set_learning_rates(muon_lr, adam_lr);
    optimizer->settings.muon.lr = muon_lr;
    optimizer->settings.adam.lr = adam_lr;
    return OJ_OK;
  });
}

oj_status oj_optimizer_state_bytes(oj_optimizer* optimizer, int64_t* muon_bytes, int64_t* adam_bytes) {
  return guarded("oj_optimizer_state_bytes", [&] {
    check_handle(optimizer);
    build(optimizer);
    const rt::StateBytes bytes = optimizer->built->state_bytes();
    if (muon_bytes) *muon_bytes = bytes.muon;
    if (adam_bytes) *adam_bytes = bytes.adam;
    return OJ_OK;
  });
}

oj_status oj_optimizer_steps_taken(oj_optimizer* optimizer, int64_t* out) {
  return guarded("oj_optimizer_steps_taken", [&] {
    check_handle(optimizer);
    require(out, "out");
    *out = optimizer->built ? optimizer->built->steps_taken() : 0;
    return OJ_OK;
  });
}

oj_status oj_optimizer_parameter_count(oj_optimizer* optimizer, int64_t* out) {
  return guarded("oj_optimizer_parameter_count", [&] {
    check_handle(optimizer);
    require(out, "out");
    *out = static_cast<int64_t>(optimizer->parameters.size());
    return OJ_OK;
  });
}

oj_status oj_optimizer_parameter_info(oj_optimizer* optimizer, int64_t index, oj_parameter_info* out) {
  return guarded("oj_optimizer_parameter_info", [&] {
    check_handle(optimizer);
    require(out, "out");
    const int64_t count = static_cast<int64_t>(optimizer->parameters.size());
    if (index < 0 || index >= count)
      throw rt::UsageError("index " + std::to_string(index) + " is not in 0.." + std::to_string(count - 1) + " (" + std::to_string(count) + " parameters)");
    build(optimizer);
    const rt::Parameter& parameter = optimizer->parameters[static_cast<size_t>(index)];
    oj_parameter_info info{};
    info.name = parameter.name.c_str();
    for (const rt::ParameterInfo& built : optimizer->infos) {
      if (built.name != parameter.name) continue;
      info.optimized = 1;
      info.uses_muon = built.muon ? 1 : 0;
      info.state_bytes = built.state_bytes;
      if (built.muon) {
        info.batch = built.matrices.batch;
        info.rows = built.matrices.rows;
        info.cols = built.matrices.cols;
        info.blocks = static_cast<int64_t>(built.matrices.blocks.size());
      }
    }
    *out = info;
    return OJ_OK;
  });
}

oj_status oj_optimizer_qk_clip(oj_optimizer* optimizer, const char* q_name, const char* k_name, int64_t head_rows, const double* s_max, int64_t n_heads,
                               double tau) {
  return guarded("oj_optimizer_qk_clip", [&] {
    check_handle(optimizer);
    const std::string q = require_string(q_name, "q_name"), k = require_string(k_name, "k_name");
    require(s_max, "s_max");
    if (n_heads <= 0) throw rt::UsageError("n_heads must be > 0 (got " + std::to_string(n_heads) + ")");
    build(optimizer);
    const std::vector<double> maxima(s_max, s_max + n_heads);
    optimizer->built->qk_clip(q, k, head_rows, maxima, tau);
    return OJ_OK;
  });
}

namespace {

// The handle's progress callback for the state file (none when not set); a non-zero return stops
// the transfer as an I/O error.
rt::FileProgressCallback progress_of(const oj_optimizer* optimizer) {
  if (!optimizer->progress) return {};
  return [function = optimizer->progress, user_data = optimizer->progress_user_data](const rt::FileProgress& progress) {
    const std::string phase(progress.phase);
    if (function(phase.c_str(), progress.done, progress.total, user_data) != 0)
      throw rt::SafetensorsError("stopped by the progress callback (it returned non-zero at " + phase + " " + std::to_string(progress.done) + " of " +
                                 std::to_string(progress.total) + ")");
  };
}

}  // namespace

oj_status oj_optimizer_set_progress(oj_optimizer* optimizer, oj_progress_fn progress, void* user_data) {
  return guarded("oj_optimizer_set_progress", [&] {
    check_handle(optimizer);
    optimizer->progress = progress;
    optimizer->progress_user_data = user_data;
    return OJ_OK;
  });
}

oj_status oj_optimizer_save_state(oj_optimizer* optimizer, const char* path) {
  return guarded(
      "oj_optimizer_save_state",
      [&] {
        check_handle(optimizer);
        const std::string file = require_string(path, "path");
        build(optimizer);
        optimizer->built->save_state(file, progress_of(optimizer));
        return OJ_OK;
      },
      rt::ErrorKind::Io);
}

oj_status oj_optimizer_load_state(oj_optimizer* optimizer, const char* path) {
  return guarded(
      "oj_optimizer_load_state",
      [&] {
        check_handle(optimizer);
        const std::string file = require_string(path, "path");
        build(optimizer);
        optimizer->built->load_state(file, progress_of(optimizer));
        return OJ_OK;
      },
      rt::ErrorKind::Io);
}

oj_status oj_optimizer_distribute_mpi(oj_optimizer* optimizer, const void* mpi_comm) {
  return guarded("oj_optimizer_distribute_mpi", [&]() -> oj_status {  // without the engine the body only throws
    check_handle(optimizer);
    require(mpi_comm, "mpi_comm");
    require_distributable(optimizer);
#ifdef ORTHOJIT_HAVE_MPI
    // Collective over the trainer's communicator (MPI_Comm_dup): its traffic never mixes with ours.
    optimizer->communicator = std::make_shared<rt::MpiCommunicator>(*static_cast<const MPI_Comm*>(mpi_comm));
    return OJ_OK;
#else
    throw rt::UnavailableError(rt::mpi_unavailable_reason());
#endif
  });
}

oj_status oj_optimizer_distribute_nccl(oj_optimizer* optimizer, void* nccl_comm, int32_t rank, int32_t world) {
  return guarded("oj_optimizer_distribute_nccl", [&]() -> oj_status {  // without the engine the body only throws
    check_handle(optimizer);
    require(nccl_comm, "nccl_comm");
    if (world < 1 || rank < 0 || rank >= world)
      throw rt::UsageError("rank " + std::to_string(rank) + " of world " + std::to_string(world) + ": expected world >= 1 and 0 <= rank < world");
    require_distributable(optimizer);
#ifdef ORTHOJIT_HAVE_NCCL
    if (const std::string why = rt::NcclCommunicator::unavailable_reason(); !why.empty()) throw rt::UnavailableError("the NCCL engine cannot run here: " + why);
    optimizer->communicator = std::shared_ptr<rt::Communicator>(rt::NcclCommunicator::wrap(nccl_comm, rank, world));
    return OJ_OK;
#else
    throw rt::UnavailableError("this build has no NCCL engine (the CUDA backend or nccl.h was not found when it was configured)");
#endif
  });
}

oj_status oj_optimizer_accumulate_gradients(oj_optimizer* optimizer, void* stream) {
  return guarded("oj_optimizer_accumulate_gradients", [&] {
    check_handle(optimizer);
    build(optimizer);
    optimizer->built->accumulate_gradients(stream);
    return OJ_OK;
  });
}

oj_status oj_optimizer_gather_parameters(oj_optimizer* optimizer, void* stream) {
  return guarded("oj_optimizer_gather_parameters", [&] {
    check_handle(optimizer);
    build(optimizer);
    optimizer->built->gather_parameters(stream);
    return OJ_OK;
  });
}

oj_status oj_optimizer_distributed_info(oj_optimizer* optimizer, oj_distributed_info* out) {
  return guarded("oj_optimizer_distributed_info", [&] {
    check_handle(optimizer);
    require(out, "out");
    build(optimizer);
    const rt::DistributedOptimizer* distributed = optimizer->built->distributed();
    if (!distributed) throw rt::InvalidStateError("this optimizer is not distributed (oj_optimizer_distribute_mpi or _nccl before build)");
    const int rank = optimizer->communicator->rank();
    const rt::RankSummary& mine = distributed->plan().ranks[static_cast<size_t>(rank)];
    oj_distributed_info info{};
    info.rank = rank;
    info.world = optimizer->communicator->world();
    info.partition_begin = mine.begin;
    info.partition_end = mine.end;
    info.padded_elements = distributed->plan().padded_elements;
    info.memory_bytes = distributed->memory_bytes();
    info.bytes_sent_last_step = distributed->bytes_sent_last_step();
    *out = info;
    return OJ_OK;
  });
}

oj_status oj_orthogonalize(const char* program, const char* backend, const char* strategy, int64_t batch, int64_t rows, int64_t cols, const float* input,
                           float* output) {
  return guarded("oj_orthogonalize", [&] {
    const std::string program_name = require_string(program, "program");
    require(input, "input");
    require(output, "output");
    if (batch <= 0 || rows <= 0 || cols <= 0)
      throw rt::UsageError("batch, rows and cols must be > 0 (got " + std::to_string(batch) + ", " + std::to_string(rows) + ", " + std::to_string(cols) + ")");
    const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(sizeof(float));
    if (rows > limit / cols || batch > limit / (rows * cols)) throw rt::UsageError("batch x rows x cols overflows");
    rt::OrthogonalizeOptions options;
    options.backend = backend ? backend : "ref";
    options.strategy = strategy ? strategy : "auto";
    rt::parse_strategy_option(options.strategy);  // UsageError naming the strategies
    check_backend_available(options.backend);
    // As `orthojit run` and Python's orthogonalize: a NaN or an infinity would make every output
    // element NaN with OJ_OK; refused, naming the element, output untouched.
    rt::require_finite_input(input, batch, rows, cols, "input");
    const orthojit::dsl::Program loaded = orthojit::kernels::load_program_by_name_or_path(program_name);
    auto compiled = rt::compile_orthogonalizer(loaded, batch, rows, cols, options);
    if (input == output) {
      const std::vector<float> copy(input, input + batch * rows * cols);
      compiled->run(copy.data(), output);
    } else {
      compiled->run(input, output);
    }
    return OJ_OK;
  });
}

oj_status oj_orthogonalize_device(const char* program, const char* strategy, int64_t batch, int64_t rows, int64_t cols, const void* input,
                                  void* output, void* stream) {
  return guarded("oj_orthogonalize_device", [&] {
    const std::string program_name = require_string(program, "program");
    require(input, "input");
    require(output, "output");
    if (batch <= 0 || rows <= 0 || cols <= 0)
      throw rt::UsageError("batch, rows and cols must be > 0 (got " + std::to_string(batch) + ", " + std::to_string(rows) + ", " + std::to_string(cols) + ")");
    if (input == output) throw rt::UsageError("input and output are the same device buffer; pass distinct buffers");
    rt::OrthogonalizeOptions options;
    options.backend = "cuda";
    options.strategy = strategy ? strategy : "auto";
    rt::parse_strategy_option(options.strategy);
    check_backend_available("cuda");
    const orthojit::dsl::Program loaded = orthojit::kernels::load_program_by_name_or_path(program_name);
    auto compiled = rt::compile_orthogonalizer(loaded, batch, rows, cols, options);
    compiled->run_device(reinterpret_cast<std::uintptr_t>(input), reinterpret_cast<std::uintptr_t>(output), stream);
    return OJ_OK;
  });
}

}  // extern "C"
