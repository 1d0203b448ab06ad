// The hybrid Muon + AdamW update rules on tensors (orthojit.Muon, orthojit/muon.py): the same C++
// functions the single-rank and the distributed optimizers run (runtime/muon/update_rules.h), on
// the memory of NumPy arrays and PyTorch tensors (DLPack, zero-copy, updated in place), so a
// Python step gives the bits a C++ step gives. The optimizer state lives in the caller's tensors
// (f32), which keeps torch's state_dict native.
//
//   MuonSettings(preset, overrides)   OptimizerSettings + the block orthogonalizer (compiled
//                                     kernels cached per shape); .set(key, value), .values()
//   plan_matrices(name, shape, ...)   MatrixPlan: how Muon sees a parameter (experts, splits)
//   default_use_muon(name, shape)     DeepSpeed's tagging rule
//   find_nonfinite(grad)              the first NaN / infinity, as the C++ step reports it
//   muon_steps(...) (equal blocks of all parameters, batched), muon_variant_update(...),
//   adam_update(...), qk_clip(...)
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autotune/json_depth.h"
#include "bindings/python/bindings.h"
#include "bindings/python/tensor_view.h"
#include "runtime/muon/deepspeed_config.h"
#include "runtime/muon/device_update_rules.h"
#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/parameter.h"
#include "runtime/muon/parameter_tagging.h"
#include "runtime/muon/presets.h"
#include "runtime/muon/state_format.h"
#include "runtime/muon/muon_step_launcher.h"
#include "runtime/muon/muon_variants.h"
#include "runtime/muon/update_rules.h"
#include "runtime/orthogonalize.h"

namespace nb = nanobind;

namespace orthojit::python {
namespace {

using runtime::DType;

// OptimizerSettings with the orthogonalizer it implies (rebuilt when a setting changes).
struct MuonSettings {
  runtime::OptimizerSettings settings;
  std::unique_ptr<runtime::BlockOrthogonalizer> orthogonalizer;
  // For parameters in device memory: the same settings on the cuda backend (whatever
  // muon.backend says for host parameters).
  std::unique_ptr<runtime::BlockOrthogonalizer> device_orthogonalizer;
  // The tensor path's compiled Muon steps and their CUDA graphs.
  std::unique_ptr<runtime::MuonStepLauncher> launcher = std::make_unique<runtime::MuonStepLauncher>();

  runtime::BlockOrthogonalizer& blocks() {
    if (!orthogonalizer) orthogonalizer = std::make_unique<runtime::BlockOrthogonalizer>(settings.muon);
    return *orthogonalizer;
  }
  runtime::BlockOrthogonalizer& device_blocks() {
    if (!device_orthogonalizer) {
      runtime::MuonGroupSettings muon = settings.muon;
      muon.backend = "cuda";
      device_orthogonalizer = std::make_unique<runtime::BlockOrthogonalizer>(muon);
    }
    return *device_orthogonalizer;
  }
};

std::string value_text(const std::string& key, nb::handle value) {
  if (nb::isinstance<nb::bool_>(value)) return nb::cast<bool>(value) ? "true" : "false";
  if (nb::isinstance<nb::int_>(value)) return std::to_string(nb::cast<long long>(value));
  if (nb::isinstance<nb::float_>(value)) {
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", nb::cast<double>(value));
    return text;
  }
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  throw nb::type_error(("optimizer setting '" + key + "': expected a number, a bool or a string, got " +
                        nb::cast<std::string>(nb::str(value.type().attr("__name__"))))
                           .c_str());
}

// apply_setting, plus what only the tests and experts need: "muon.precision" = "f64" (the exact
// iteration, ref backend), "muon.square_precision" (DeepSpeed's storage for square matrices under
// gram), "muon.coefficients" (a, b, c for every step); a cuda backend is checked for here.
}  // namespace

const runtime::OptimizerSettings& settings_of(nb::handle muon_settings) { return nb::cast<const MuonSettings&>(muon_settings).settings; }

void apply_python_setting(runtime::OptimizerSettings& settings, const std::string& key, nb::handle value) {
  runtime::MuonGroupSettings& muon = settings.muon;
  if (key == "muon.coefficients") {
    std::vector<double> abc = nb::cast<std::vector<double>>(value);
    if (abc.size() != 3) throw std::invalid_argument("muon.coefficients: expected three numbers (a, b, c)");
    muon.coefficients = dsl::Triple{abc[0], abc[1], abc[2]};
  } else {
    const std::string text = value_text(key, value);
    if (key == "muon.precision" && (text == "f64" || text == "float64")) {
      muon.precision = ScalarType::F64;
    } else if (key == "muon.square_precision") {
      auto type = parse_scalar_type(text);
      if (!type) throw std::invalid_argument(key + ": '" + text + "' is not bf16, f16, f32 or f64");
      muon.square_precision = *type;
    } else {
      if (key == "muon.backend" && text == "cuda") {
        const std::string why = runtime::cuda_backend_unavailable_reason();
        if (!why.empty()) throw std::invalid_argument("muon.backend = cuda: " + why);
      }
      runtime::apply_setting(settings, key, text);
    }
  }
}

namespace {

void set_setting(MuonSettings& self, const std::string& key, nb::handle value) {
  apply_python_setting(self.settings, key, value);
  self.orthogonalizer.reset();  // compiled for the old settings
  self.device_orthogonalizer.reset();
  self.launcher = std::make_unique<runtime::MuonStepLauncher>();
}

nb::dict setting_values(const MuonSettings& self) {
  const runtime::MuonGroupSettings& m = self.settings.muon;
  const runtime::AdamGroupSettings& a = self.settings.adam;
  auto type_name = [](const std::optional<ScalarType>& type) -> nb::object {
    if (!type) return nb::none();
    return nb::str(std::string(to_string(*type)).c_str());
  };
  nb::dict values;
  values["preset"] = self.settings.preset;
  values["muon.lr"] = m.lr;
  values["muon.momentum"] = m.momentum;
  values["muon.nesterov"] = m.nesterov;
  values["muon.weight_decay"] = m.weight_decay;
  values["muon.momentum_kind"] = std::string(to_string(m.momentum_kind));
  values["muon.lr_adjust"] = std::string(to_string(m.lr_adjust));
  values["muon.program"] = m.program;
  values["muon.strategy"] = m.strategy;
  values["muon.precision"] = type_name(m.precision);
  values["muon.square_precision"] = type_name(m.square_precision);
  values["muon.ns_steps"] = m.ns_steps ? nb::object(nb::int_(*m.ns_steps)) : nb::none();
  values["muon.ns_eps"] = m.ns_eps ? nb::object(nb::float_(*m.ns_eps)) : nb::none();
  values["muon.norm_clamp"] = m.norm_clamp;
  values["muon.coefficients"] = m.coefficients ? nb::object(nb::make_tuple(m.coefficients->a, m.coefficients->b, m.coefficients->c)) : nb::none();
  values["muon.backend"] = m.backend;
  values["muon.threads"] = m.threads;
  values["muon.variant"] = std::string(to_string(m.variant));
  values["muon.beta2"] = m.variant_beta2 ? nb::object(nb::float_(*m.variant_beta2)) : nb::none();  // None: the variant's default
  values["muon.variant_eps"] = m.variant_eps ? nb::object(nb::float_(*m.variant_eps)) : nb::none();
  values["muon.sign_momentum"] = m.sign_momentum;
  values["adam.lr"] = a.lr;
  values["adam.beta1"] = a.beta1;
  values["adam.beta2"] = a.beta2;
  values["adam.eps"] = a.eps;
  values["adam.weight_decay"] = a.weight_decay;
  values["adam.formula"] = std::string(to_string(a.formula));
  values["tensor_layout"] = std::string(to_string(self.settings.tensor_layout));
  values["conv_scale"] = std::string(to_string(self.settings.conv_scale));
  values["missing_grad"] = std::string(to_string(self.settings.missing_gradient));
  values["tagging"] = std::string(to_string(self.settings.tagging));
  values["experts_as_batch"] = self.settings.tensor_layout == runtime::MatrixLayout::Batch;
  return values;
}

// A tensor's memory as the update rules see it: CPU, C-contiguous, f32 / bf16 / f16.
// Tensor memory as the update rules take it (bindings/python/tensor_view.h).
using Elements = TensorView;
Elements elements(const nb::ndarray<>& array, const std::string& what, bool f32_only = false) { return tensor_view(array, what, f32_only); }

void expect_count(const Elements& e, int64_t count, const std::string& what, const std::string& of) {
  if (e.count != count)
    throw std::invalid_argument(what + " has " + std::to_string(e.count) + " elements but " + of + " has " + std::to_string(count));
}

std::string label(const std::string& name) { return name.empty() ? std::string("the parameter") : "parameter '" + name + "'"; }

// The group's hyperparameters, checked, on the settings' formulas (muon_variant_update).
runtime::MuonGroupSettings muon_group(const MuonSettings& self, const std::string& who, double lr, double momentum, double weight_decay, bool nesterov) {
  if (!(lr >= 0) || !std::isfinite(lr)) throw std::invalid_argument(who + ": lr must be finite and >= 0");
  if (!(momentum >= 0 && momentum < 1)) throw std::invalid_argument(who + ": momentum must be in [0, 1)");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) throw std::invalid_argument(who + ": weight_decay must be finite and >= 0");
  runtime::MuonGroupSettings muon = self.settings.muon;
  muon.lr = lr;
  muon.momentum = momentum;
  muon.weight_decay = weight_decay;
  muon.nesterov = nesterov;
  return muon;
}

// Compiles what muon_variant_update (or a Muon step of this parameter alone) will run for this
// parameter, without changing anything: Muon.step calls it for every parameter before it updates
// the first, so that a compile that fails leaves every parameter and state as it was.
void muon_prepare(MuonSettings& self, const runtime::MatrixPlan& plan, const nb::ndarray<>& param, const nb::ndarray<>& grad, const std::string& name) {
  const std::string who = label(name);
  elements(param, who);  // what muon_variant_update will refuse, refused before anything changes
  elements(grad, who + ": the gradient");
  nb::gil_scoped_release release;
  self.blocks().prepare(plan);
}

// NorMuon / AdaMuon (muon.variant): HybridOptimizer::variant_update's path on the tensors'
// memory, `second_moment` the variant's f32 state (variant_state_elements values) and `step`
// AdaMuon's count, already incremented (NorMuon ignores it).
double muon_variant_update(MuonSettings& self, const runtime::MatrixPlan& plan, const nb::ndarray<>& param, const nb::ndarray<>& grad,
                           const nb::ndarray<>& momentum_buffer, const nb::ndarray<>& second_moment, int64_t step, double lr, double momentum,
                           double weight_decay, bool nesterov, const std::string& name) {
  const std::string who = label(name);
  const runtime::MuonVariant variant = self.settings.muon.variant;
  if (variant == runtime::MuonVariant::Muon) throw std::invalid_argument(who + ": muon_variant_update needs muon.variant normuon or adamuon (it is muon)");
  const Elements p = elements(param, who), g = elements(grad, who + ": the gradient"), m = elements(momentum_buffer, who + ": momentum_buffer", true),
                 v = elements(second_moment, who + ": the variant's second moment", true);
  const int64_t count = plan.batch * plan.rows * plan.cols;
  expect_count(p, count, who, "its matrix plan (" + std::to_string(plan.batch) + " x " + std::to_string(plan.rows) + " x " + std::to_string(plan.cols) + ")");
  expect_count(g, count, who + ": the gradient", "the parameter");
  expect_count(m, count, who + ": momentum_buffer", "the parameter");
  expect_count(v, runtime::variant_state_elements(variant, plan), who + ": the " + std::string(runtime::to_string(variant)) + " second moment",
               variant == runtime::MuonVariant::NorMuon ? "one per row of each matrix" : "the parameter");
  if (variant == runtime::MuonVariant::AdaMuon && step < 1) throw std::invalid_argument(who + ": the AdaMuon step count must be >= 1 (incremented before the update)");
  const runtime::MuonGroupSettings muon = muon_group(self, who, lr, momentum, weight_decay, nesterov);
  runtime::BlockOrthogonalizer& orthogonalizer = self.blocks();
  const double before = orthogonalizer.seconds();
  {
    nb::gil_scoped_release release;
    // The gradient in its own type, widened as it is read (no f32 copy of it).
    runtime::variant_muon_step(muon, plan, orthogonalizer, g.dtype, g.data, static_cast<float*>(m.data), static_cast<float*>(v.data), step, p.dtype, p.data);
  }
  return orthogonalizer.seconds() - before;
}

void adam_update(MuonSettings& self, int64_t step, const nb::ndarray<>& param, const nb::ndarray<>& grad, const nb::ndarray<>& exp_avg,
                 const nb::ndarray<>& exp_avg_sq, double lr, double beta1, double beta2, double eps, double weight_decay, const std::string& name) {
  const std::string who = label(name);
  const Elements p = elements(param, who), g = elements(grad, who + ": the gradient"), m = elements(exp_avg, who + ": exp_avg", true),
                 v = elements(exp_avg_sq, who + ": exp_avg_sq", true);
  expect_count(g, p.count, who + ": the gradient", "the parameter");
  expect_count(m, p.count, who + ": exp_avg", "the parameter");
  expect_count(v, p.count, who + ": exp_avg_sq", "the parameter");
  if (step < 1) throw std::invalid_argument(who + ": the AdamW step count must be >= 1 (incremented before the update)");
  if (!(lr >= 0) || !std::isfinite(lr)) throw std::invalid_argument(who + ": lr must be finite and >= 0");
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) throw std::invalid_argument(who + ": betas must be in [0, 1)");
  if (!(eps > 0) || !std::isfinite(eps)) throw std::invalid_argument(who + ": eps must be finite and > 0");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) throw std::invalid_argument(who + ": weight_decay must be finite and >= 0");
  runtime::AdamGroupSettings adam = self.settings.adam;
  adam.lr = lr;
  adam.beta1 = beta1;
  adam.beta2 = beta2;
  adam.eps = eps;
  adam.weight_decay = weight_decay;
  nb::gil_scoped_release release;
  // The gradient in its own type: an f32 copy of it was most of the step's time for a large
  // embedding (a 64 MiB allocation and an extra pass; bench/RESULTS.md, twenty-sixth session).
  runtime::adam_step(adam, step, g.dtype, g.data, static_cast<float*>(m.data), static_cast<float*>(v.data), p.dtype, p.data, 0, p.count);
}

// HybridOptimizer::step's check: the first NaN or infinity of a gradient, as it reports it.
std::optional<std::string> find_nonfinite(const nb::ndarray<>& grad, const std::string& name) {
  const Elements g = elements(grad, label(name) + ": the gradient");
  const int64_t i = runtime::first_nonfinite(g.dtype, g.data, g.count);
  if (i < 0) return std::nullopt;
  const double value = runtime::load_element(g.dtype, g.data, i);
  return label(name) + ": gradient element " + std::to_string(i) + " is " + (std::isnan(value) ? "NaN" : "infinite") +
         "; the step was skipped and no parameter or state changed";
}

// QK-clip on tensors: the runtime's check_qk_clip and qk_clip_rows (update_rules.h), with the
// shapes checked against the tensors.
void qk_clip(const nb::ndarray<>& q, const nb::ndarray<>& k, int64_t head_rows, const std::vector<double>& s_max, double tau,
             const std::string& q_name, const std::string& k_name) {
  runtime::check_qk_clip(head_rows, s_max, tau);
  const Elements tensors[2] = {elements(q, "QK-clip: " + label(q_name)), elements(k, "QK-clip: " + label(k_name))};
  const std::string names[2] = {q_name, k_name};
  for (int i = 0; i < 2; ++i) {
    const Elements& p = tensors[i];
    if (p.shape.size() < 2 || p.shape[0] % head_rows != 0 || p.shape[0] / head_rows != static_cast<int64_t>(s_max.size())) {
      std::string shape = "(";
      for (size_t d = 0; d < p.shape.size(); ++d) shape += (d ? ", " : "") + std::to_string(p.shape[d]);
      throw std::invalid_argument("QK-clip: " + label(names[i]) + " " + shape + ") does not split into " + std::to_string(s_max.size()) + " heads of " +
                                  std::to_string(head_rows) + " rows");
    }
  }
  if (tensors[0].data == tensors[1].data) throw std::invalid_argument("QK-clip: W_q and W_k are the same tensor");
  for (const Elements& p : tensors) runtime::qk_clip_rows(p.dtype, p.data, p.count / p.shape[0], head_rows, s_max, tau);
}

// Row-major contiguity (dimensions of extent 1 may have any stride), as tensor_view checks it.
void require_contiguous(const nb::ndarray<>& a, const std::string& what) {
  int64_t expected = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expected) throw std::invalid_argument(what + " is not contiguous");
    expected *= static_cast<int64_t>(a.shape(d));
  }
}

// O = NS(U) for a batch of same-shape f32 matrices (batch x rows x cols, contiguous) where the
// tensors are: host memory through the settings' backend, CUDA memory (device 0, the primary
// context PyTorch uses) through the cuda backend, enqueued on `stream` (torch's current stream,
// as an integer CUstream) with no synchronization. The grouping of a step's blocks into such
// batches is the caller's (orthojit/muon.py).
void orthogonalize_batch(MuonSettings& self, const nb::ndarray<>& input, const nb::ndarray<>& output, std::uintptr_t stream) {
  auto check = [](const nb::ndarray<>& a, const char* what) {
    const nb::dlpack::dtype type = a.dtype();
    if (type.lanes != 1 || static_cast<nb::dlpack::dtype_code>(type.code) != nb::dlpack::dtype_code::Float || type.bits != 32)
      throw nb::type_error((std::string(what) + ": expected float32").c_str());
    if (a.ndim() != 3) throw std::invalid_argument(std::string(what) + ": expected a batch x rows x cols tensor");
    require_contiguous(a, what);
  };
  check(input, "orthogonalize_batch input");
  check(output, "orthogonalize_batch output");
  for (size_t d = 0; d < 3; ++d)
    if (input.shape(d) != output.shape(d)) throw std::invalid_argument("orthogonalize_batch: input and output shapes differ");
  if (input.device_type() != output.device_type() || input.device_id() != output.device_id())
    throw std::invalid_argument("orthogonalize_batch: input and output are on different devices");
  const int64_t batch = static_cast<int64_t>(input.shape(0)), rows = static_cast<int64_t>(input.shape(1)), cols = static_cast<int64_t>(input.shape(2));
  if (input.device_type() == nb::device::cpu::value) {
    auto compiled = self.blocks().compiled(batch, rows, cols);
    nb::gil_scoped_release release;
    compiled->run(static_cast<const float*>(input.data()), static_cast<float*>(output.data()));
    return;
  }
  if (input.device_type() != nb::device::cuda::value)
    throw std::invalid_argument("orthogonalize_batch: DLPack device type " + std::to_string(input.device_type()) + " is neither cpu nor cuda");
  if (const std::string why = runtime::cuda_device_mismatch_reason(input.device_id()); !why.empty())
    throw std::invalid_argument("orthogonalize_batch: " + why);
  const std::string why = runtime::cuda_backend_unavailable_reason();
  if (!why.empty()) throw std::invalid_argument("parameters in CUDA memory need the cuda backend: " + why);
  auto compiled = self.device_blocks().compiled(batch, rows, cols);
  nb::gil_scoped_release release;
  compiled->run_device(reinterpret_cast<std::uintptr_t>(input.data()), reinterpret_cast<std::uintptr_t>(output.data()), reinterpret_cast<void*>(stream));
}

// One group of a tensor-path Muon step: equal blocks (rows x cols) of any parameters, with the
// gradient and parameter types and the momentum form, and per block the addresses of its first
// gradient, momentum and parameter elements (host or device 0 memory) and its scalars.
using StepEntry = std::tuple<std::uintptr_t, std::uintptr_t, std::uintptr_t, double, double, double>;
using StepGroup = std::tuple<bool, int64_t, int64_t, std::string, std::string, bool, bool, std::vector<StepEntry>>;

DType parse_step_dtype(const std::string& text, const char* what) {
  auto type = runtime::parse_dtype(text);
  if (!type) throw std::invalid_argument(std::string(what) + " type '" + text + "': expected f32, bf16 or f16");
  return *type;
}

// The whole Muon part of a tensor-path step: every group compiled (cached) as a Muon step and
// run in order, on the settings' host backend for host memory or the cuda backend for device
// memory (enqueued on `stream`; one CUDA graph for all groups when `graphs`). Returns how many
// graph launches this settings object has made so far. `run` false: compiles every group and
// stops, changing nothing (Muon.step compiles the whole step before it updates anything).
int muon_steps(MuonSettings& self, const std::vector<StepGroup>& groups, std::uintptr_t stream, bool graphs, bool run) {
  std::vector<runtime::MuonStepGroup> compiled;
  for (const auto& [device, rows, cols, grad_text, param_text, ema, nesterov, entries] : groups) {
    if (rows <= 0 || cols <= 0 || entries.empty()) throw std::invalid_argument("muon_steps: a group needs positive rows, cols and at least one block");
    if (device) {
      const std::string why = runtime::cuda_backend_unavailable_reason();
      if (!why.empty()) throw std::invalid_argument("parameters in CUDA memory need the cuda backend: " + why);
    }
    const ir::MuonStepSpec spec{ema, nesterov, runtime::scalar_type(parse_step_dtype(grad_text, "gradient")),
                                runtime::scalar_type(parse_step_dtype(param_text, "parameter"))};
    runtime::MuonStepGroup group;
    group.compiled = (device ? self.device_blocks() : self.blocks()).compiled(static_cast<int64_t>(entries.size()), rows, cols, spec);
    for (const auto& [grad, momentum, param, beta, step, decay] : entries) {
      if (!grad || !momentum || !param) throw std::invalid_argument("muon_steps: a null gradient, momentum or parameter address");
      group.matrices.push_back({grad, momentum, param, beta, step, decay});
    }
    compiled.push_back(std::move(group));
  }
  if (!run) return self.launcher->graph_launches();
  nb::gil_scoped_release release;
  self.launcher->run(compiled, reinterpret_cast<void*>(stream), graphs);
  return self.launcher->graph_launches();
}

// Device tensors for the generated element-wise kernels: CUDA memory on device 0, contiguous,
// f32 / bf16 / f16 (f32 only for state), `count` elements.
struct DeviceTensor {
  std::uintptr_t pointer = 0;
  DType dtype = DType::F32;
  int64_t count = 0;
};

DeviceTensor device_tensor(const nb::ndarray<>& array, const std::string& what, bool f32_only = false, bool f64 = false) {
  if (array.device_type() != nb::device::cuda::value) throw std::invalid_argument(what + " is not in CUDA memory");
  if (const std::string why = runtime::cuda_device_mismatch_reason(array.device_id()); !why.empty()) throw std::invalid_argument(what + ": " + why);
  DeviceTensor result;
  const nb::dlpack::dtype type = array.dtype();
  const auto code = static_cast<nb::dlpack::dtype_code>(type.code);
  if (f64) {
    if (type.lanes != 1 || code != nb::dlpack::dtype_code::Float || type.bits != 64) throw nb::type_error((what + ": expected float64").c_str());
  } else if (type.lanes == 1 && code == nb::dlpack::dtype_code::Float && type.bits == 32) result.dtype = DType::F32;
  else if (!f32_only && type.lanes == 1 && code == nb::dlpack::dtype_code::Bfloat && type.bits == 16) result.dtype = DType::BF16;
  else if (!f32_only && type.lanes == 1 && code == nb::dlpack::dtype_code::Float && type.bits == 16) result.dtype = DType::F16;
  else throw nb::type_error((what + ": expected " + (f32_only ? "float32" : "float32, bfloat16 or float16")).c_str());
  require_contiguous(array, what);
  result.pointer = reinterpret_cast<std::uintptr_t>(array.data());
  result.count = static_cast<int64_t>(array.size());
  return result;
}

void expect_device_count(const DeviceTensor& t, int64_t count, const std::string& what) {
  if (t.count != count) throw std::invalid_argument(what + " has " + std::to_string(t.count) + " elements, expected " + std::to_string(count));
}

void device_adam(MuonSettings& self, int64_t step, const nb::ndarray<>& param, const nb::ndarray<>& grad, const nb::ndarray<>& exp_avg,
                 const nb::ndarray<>& exp_avg_sq, double lr, double beta1, double beta2, double eps, double weight_decay, std::uintptr_t stream) {
  const DeviceTensor p = device_tensor(param, "the parameter"), g = device_tensor(grad, "the gradient"), m = device_tensor(exp_avg, "exp_avg", true),
                     v = device_tensor(exp_avg_sq, "exp_avg_sq", true);
  expect_device_count(g, p.count, "the gradient");
  expect_device_count(m, p.count, "exp_avg");
  expect_device_count(v, p.count, "exp_avg_sq");
  if (step < 1) throw std::invalid_argument("the AdamW step count must be >= 1 (incremented before the update)");
  runtime::AdamGroupSettings adam = self.settings.adam;
  adam.lr = lr;
  adam.beta1 = beta1;
  adam.beta2 = beta2;
  adam.eps = eps;
  adam.weight_decay = weight_decay;
  nb::gil_scoped_release release;
  runtime::device_adam_step(adam, step, g.dtype, g.pointer, m.pointer, v.pointer, p.dtype, p.pointer, p.count, reinterpret_cast<void*>(stream));
}

runtime::MatrixPlan plan_matrices(const std::string& name, const std::vector<int64_t>& shape, const std::string& layout,
                                  const std::vector<int64_t>& row_splits, int64_t head_rows, const std::optional<bool>& experts_as_batch,
                                  const std::string& tensor_layout, const std::string& conv_scale) {
  runtime::Parameter parameter;
  parameter.name = name;
  parameter.shape = shape;
  const auto chosen = runtime::parse_matrix_layout(layout);
  if (!chosen) throw std::invalid_argument("parameter '" + name + "': layout '" + layout + "' is not auto, flatten, batch or trailing");
  parameter.layout = *chosen;
  auto fallback = runtime::parse_matrix_layout(tensor_layout);
  if (!fallback || *fallback == runtime::MatrixLayout::Auto)
    throw std::invalid_argument("tensor_layout '" + tensor_layout + "' is not flatten, batch or trailing");
  if (experts_as_batch) fallback = *experts_as_batch ? runtime::MatrixLayout::Batch : runtime::MatrixLayout::Flatten;
  const auto scale = runtime::parse_conv_scale(conv_scale);
  if (!scale) throw std::invalid_argument("conv_scale '" + conv_scale + "' is not kernel or matrix");
  parameter.row_splits = row_splits;
  parameter.head_rows = head_rows;
  return runtime::plan_matrices(parameter, *fallback, *scale);
}

bool default_use_muon(const std::string& name, const std::vector<int64_t>& shape, const std::string& rule) {
  const auto parsed = runtime::parse_tagging_rule(rule);
  if (!parsed) throw std::invalid_argument("tagging rule '" + rule + "' is not deepspeed or moonlight");
  return runtime::default_use_muon(name, shape, *parsed);
}

}  // namespace

void register_optimizer(nb::module_& m) {
  nb::class_<runtime::MatrixPlan>(m, "MatrixPlan", "How Muon sees one parameter: batch matrices of rows x cols, cut into row blocks.")
      .def_ro("batch", &runtime::MatrixPlan::batch)
      .def_ro("rows", &runtime::MatrixPlan::rows)
      .def_ro("cols", &runtime::MatrixPlan::cols)
      .def_prop_ro(
          "scale_shape",
          [](const runtime::MatrixPlan& plan) -> std::optional<std::pair<int64_t, int64_t>> {
            if (plan.scale_rows > 0 && plan.scale_cols > 0) return std::make_pair(plan.scale_rows, plan.scale_cols);
            return std::nullopt;
          },
          "(rows, cols) every block's lr adjustment is taken from (a 4-D filter under conv_scale kernel), or None: each block's own")
      .def_prop_ro(
          "blocks",
          [](const runtime::MatrixPlan& plan) {
            std::vector<std::pair<int64_t, int64_t>> blocks;
            for (const runtime::MatrixBlock& block : plan.blocks) blocks.push_back({block.row_offset, block.rows});
            return blocks;
          },
          "(row_offset, rows) of every block")
      .def("__repr__", [](const runtime::MatrixPlan& plan) {
        std::string text = "MatrixPlan(batch=" + std::to_string(plan.batch) + ", rows=" + std::to_string(plan.rows) + ", cols=" + std::to_string(plan.cols) + ", blocks=[";
        for (size_t i = 0; i < plan.blocks.size(); ++i)
          text += (i ? ", " : "") + std::string("(") + std::to_string(plan.blocks[i].row_offset) + ", " + std::to_string(plan.blocks[i].rows) + ")";
        return text + "])";
      });

  nb::class_<MuonSettings>(m, "MuonSettings",
                           "The hybrid optimizer's settings (a preset plus overrides, the keys of apply_setting) and the block "
                           "orthogonalizer they imply, with its compiled kernels cached per shape.")
      .def(
          "__init__",
          [](MuonSettings* self, const std::string& preset, nb::dict overrides) {
            new (self) MuonSettings{runtime::preset_settings(preset), nullptr};
            for (auto [key, value] : overrides) set_setting(*self, nb::cast<std::string>(key), value);
          },
          nb::arg("preset") = "deepspeed", nb::arg("overrides") = nb::dict())
      .def("set", &set_setting, nb::arg("key"), nb::arg("value"),
           "Applies one setting (muon.lr, muon.backend, adam.formula, ...; also muon.precision = f64, muon.square_precision, "
           "muon.coefficients); raises ValueError naming the key and what is valid.")
      .def("values", &setting_values, "Every setting as a dict (key -> value).")
      .def("describe", [](const MuonSettings& self) { return runtime::describe(self.settings); })
      .def_prop_ro("preset", [](const MuonSettings& self) { return self.settings.preset; })
      .def_prop_ro("orthogonalize_seconds", [](const MuonSettings& self) { return self.orthogonalizer ? self.orthogonalizer->seconds() : 0.0; });

  m.def(
      "deepspeed_settings",
      [](const std::string& json_text, bool strict, const std::string& origin) {
        if (const std::string deep = autotune::json_depth_problem(json_text); !deep.empty()) throw std::invalid_argument(origin + ": " + deep);
        nlohmann::json config;
        try {
          config = nlohmann::json::parse(json_text);
        } catch (const nlohmann::json::parse_error& error) {
          throw std::invalid_argument(origin + ": not valid JSON: " + error.what());
        }
        runtime::DeepSpeedConfig parsed;
        try {
          parsed = runtime::parse_deepspeed_config(config, strict);
        } catch (const runtime::DeepSpeedConfigError& error) {
          throw std::invalid_argument(origin + ": " + error.what());
        }
        std::vector<std::pair<std::string, std::string>> ignored;
        for (const runtime::IgnoredKey& key : parsed.ignored_keys) ignored.push_back({key.path, key.valid_keys});
        return std::make_pair(MuonSettings{parsed.optimizer, nullptr}, ignored);
      },
      nb::arg("json_text"), nb::arg("strict") = false, nb::arg("origin") = "the DeepSpeed configuration",
      "(MuonSettings, [(path, valid keys)]) from a DeepSpeed JSON config: its optimizer section as runtime/muon/deepspeed_config.h reads "
      "it; unknown keys are listed (strict: an error).");
  m.def(
      "muon_presets",
      [] {
        nb::list presets;
        for (const runtime::MuonPreset& preset : runtime::muon_presets()) {
          nb::dict entry;
          entry["name"] = preset.name;
          entry["description"] = preset.description;
          entry["source"] = preset.source;
          presets.append(entry);
        }
        return presets;
      },
      "The optimizer presets, the runtime's one list (runtime/muon/presets.h): [{name, description, source}], the default first.");
  m.def("default_use_muon", &default_use_muon, nb::arg("name"), nb::arg("shape"), nb::arg("rule") = "deepspeed",
        "The tagging rule: deepspeed (Muon iff ndim >= 2 and the lower-cased name contains neither 'embed' nor 'lm_head') or moonlight "
        "(ndim >= 2 and the name, case-sensitive, contains neither 'embed_tokens' nor 'lm_head').");
  m.def("plan_matrices", &plan_matrices, nb::arg("name"), nb::arg("shape"), nb::arg("layout") = "auto", nb::arg("row_splits") = std::vector<int64_t>{},
        nb::arg("head_rows") = 0, nb::arg("experts_as_batch").none() = nb::none(), nb::arg("tensor_layout") = "flatten", nb::arg("conv_scale") = "kernel",
        "How Muon sees a parameter (layout auto | flatten | batch | trailing, auto meaning tensor_layout; QKV row_splits; per-head "
        "head_rows); raises ValueError naming the parameter.");
  m.def(
      "check_cuda_device",
      [](int ordinal) {
        if (const std::string why = runtime::cuda_device_mismatch_reason(ordinal); !why.empty()) throw std::invalid_argument(why);
      },
      nb::arg("ordinal"),
      "Raises ValueError when orthojit's CUDA kernels run on another device than cuda:<ordinal> in this process (one device per process); "
      "the first call chooses the device when nothing has yet.");
  m.def(
      "lr_scale",
      [](const std::string& adjust, int64_t rows, int64_t cols) {
        const auto parsed = runtime::parse_lr_adjust(adjust);
        if (!parsed) throw std::invalid_argument("lr adjustment '" + adjust + "' is not none, original, match_rms_adamw or spectral");
        return runtime::lr_scale(*parsed, rows, cols);
      },
      nb::arg("adjust"), nb::arg("rows"), nb::arg("cols"), "The lr adjustment s of a rows x cols block (update_rules.h lr_scale).");
  m.def("momentum_conversion_factor", [](const std::string& from, const std::string& to, double beta) {
        const auto a = runtime::parse_momentum_kind(from), b = runtime::parse_momentum_kind(to);
        if (!a || !b) throw std::invalid_argument("momentum kinds are ema or sum (got '" + from + "', '" + to + "')");
        if (!(beta >= 0 && beta < 1)) throw std::invalid_argument("momentum must be in [0, 1)");
        return runtime::momentum_conversion_factor(*a, *b, beta);
      }, nb::arg("from_kind"), nb::arg("to_kind"), nb::arg("momentum"),
      "The factor that turns a momentum_buffer of one form into the other's (sum -> ema: 1 - beta), exact for a constant beta.");
  m.def("saved_momentum_kind", [](const std::string& format, const std::string& preset, const std::string& kind) {
        return std::string(runtime::to_string(runtime::saved_momentum_kind(format, preset, kind)));
      }, nb::arg("format"), nb::arg("preset"), nb::arg("momentum_kind") = "",
      "The momentum form (ema | sum) of a saved state, from its format, preset and recorded momentum_kind.");
  m.def("momentum_mismatch_message", [](const std::string& where, const std::string& format, const std::string& saved, const std::string& wanted) {
        return runtime::momentum_mismatch_message(where, format, *runtime::parse_momentum_kind(saved), *runtime::parse_momentum_kind(wanted));
      }, nb::arg("where"), nb::arg("format"), nb::arg("saved"), nb::arg("wanted"));
  m.attr("STATE_FORMAT") = runtime::kStateFormat;
  m.def("orthogonalize_batch", &orthogonalize_batch, nb::arg("settings"), nb::arg("input"), nb::arg("output"), nb::arg("stream") = 0,
        "O = NS(U) for a batch x rows x cols f32 tensor: host memory on the settings' backend, CUDA memory on the cuda backend, "
        "enqueued on `stream` (an integer CUstream, e.g. torch.cuda.current_stream().cuda_stream) without synchronizing.");
  m.def("muon_steps", &muon_steps, nb::arg("settings"), nb::arg("groups"), nb::arg("stream") = 0, nb::arg("graphs") = true, nb::arg("run") = true,
        "The Muon part of a step as compiled Muon steps (momentum, Newton-Schulz and the update in the iteration's kernels). groups: "
        "(device, rows, cols, grad dtype, param dtype, ema, nesterov, [(grad address, momentum address, param address, beta, lr*s, "
        "1 - lr*wd), ...]); device groups on the cuda backend on `stream`, as one CUDA graph when `graphs`; `run` false: compile only. "
        "Returns the graph launches so far.");
  m.def("device_adam", &device_adam, nb::arg("settings"), nb::arg("step"), nb::arg("param"), nb::arg("grad"), nb::arg("exp_avg"), nb::arg("exp_avg_sq"),
        nb::arg("lr"), nb::arg("beta1"), nb::arg("beta2"), nb::arg("eps"), nb::arg("weight_decay"), nb::arg("stream"),
        "CUDA tensors: one AdamW step (the settings' formula) with the generated kernel on `stream`.");
  m.def("find_nonfinite", &find_nonfinite, nb::arg("grad"), nb::arg("name") = "",
        "None when every gradient element is finite, else the C++ step's report of the first NaN or infinity.");
  m.def("muon_prepare", &muon_prepare, nb::arg("settings"), nb::arg("plan"), nb::arg("param"), nb::arg("grad"), nb::arg("name") = "",
        "Compiles what muon_variant_update will run for this parameter; changes nothing.");
  m.def("muon_variant_update", &muon_variant_update, nb::arg("settings"), nb::arg("plan"), nb::arg("param"), nb::arg("grad"), nb::arg("momentum_buffer"),
        nb::arg("second_moment"), nb::arg("step"), nb::arg("lr"), nb::arg("momentum"), nb::arg("weight_decay"), nb::arg("nesterov"), nb::arg("name") = "",
        "One NorMuon / AdaMuon step in place (muon.variant): momentum, U (sign(U) for AdaMuon), O = NS(U) per block, the variant's rescaling with "
        "its f32 second moment (and AdaMuon's step count, already incremented), p <- p(1 - lr wd) - lr s O'. Returns the orthogonalization's seconds.");
  m.def("adam_update", &adam_update, nb::arg("settings"), nb::arg("step"), nb::arg("param"), nb::arg("grad"), nb::arg("exp_avg"), nb::arg("exp_avg_sq"),
        nb::arg("lr"), nb::arg("beta1"), nb::arg("beta2"), nb::arg("eps"), nb::arg("weight_decay"), nb::arg("name") = "",
        "One AdamW step in place (step already incremented), with the settings' formula (standard | moonlight).");
  m.def("qk_clip", &qk_clip, nb::arg("q"), nb::arg("k"), nb::arg("head_rows"), nb::arg("s_max"), nb::arg("tau"), nb::arg("q_name") = "",
        nb::arg("k_name") = "", "QK-clip (MuonClip): head h's rows of W_q and W_k scaled by sqrt(min(1, tau / s_max[h])).");
}

}  // namespace orthojit::python
