// orthojit._orthojit, the ZeRO part: the partition planner (`orthojit plan --json`, runtime/records.h)
// and the distributed step (runtime/zero/distributed_optimizer.h) over the MPI communicator a
// torch.distributed / mpi4py program hands in (orthojit.DistributedMuon, orthojit/distributed.py).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "bindings/python/bindings.h"
#include "bindings/python/tensor_view.h"
#include "bindings/python/torch_communicator.h"
#include "runtime/model_config.h"
#include "runtime/muon/deepspeed_config.h"
#include "runtime/records.h"
#include "runtime/shared_options.h"
#include "runtime/muon/memory_space.h"
#include "runtime/zero/communicator.h"
#include "runtime/zero/model_layout.h"
#include "runtime/zero/distributed_optimizer.h"
#ifdef ORTHOJIT_HAVE_MPI
#include "runtime/zero/mpi_communicator.h"
#else
#include "runtime/build_parts.h"
#endif
#ifdef ORTHOJIT_HAVE_NCCL
#include "runtime/zero/nccl_communicator.h"
#endif
#include "runtime/zero/partition_plan.h"

namespace nb = nanobind;

namespace orthojit::python {
namespace {

std::string plan(const std::string& model, bool model_is_json, int world, int stage, const std::string& mode, int64_t alignment, bool per_head,
                 int64_t parameter_bytes, int64_t gradient_bytes) {
  if (world < 1) throw nb::value_error(("world must be at least 1 (got " + std::to_string(world) + ")").c_str());
  if (stage < 1 || stage > 3) throw nb::value_error(("stage must be 1, 2 or 3 (got " + std::to_string(stage) + ")").c_str());
  if (alignment < 1) throw nb::value_error(("alignment must be at least 1 element (got " + std::to_string(alignment) + ")").c_str());
  if (parameter_bytes < 1 || gradient_bytes < 1) throw nb::value_error("parameter_bytes and gradient_bytes must be positive");
  runtime::PlanSettings settings;
  settings.world = world;
  settings.stage = stage;
  settings.mode = runtime::parse_plan_mode(mode);
  settings.alignment = alignment;
  settings.parameter_bytes = parameter_bytes;
  settings.gradient_bytes = gradient_bytes;
  autotune::ModelShapeOptions options;
  options.per_head = per_head;
  const std::string label = model_is_json ? "model (dict)" : model;
  const autotune::ModelShapes shapes =
      model_is_json ? runtime::parse_model_matrices(model, "model_config (dict)", options) : runtime::load_model_matrices(model, options);
  return runtime::plan_record(label, runtime::plan_partitions(runtime::model_plan_tensors(shapes), settings)).dump();
}

// The distributed optimizer with the communicator it owns (a duplicate of the caller's MPI_Comm,
// or the one-process communicator).
class Distributed {
 public:
  // parameters: (name, tensor, use_muon or None), all CPU or all CUDA tensors; mpi_comm: the
  // MPI_Comm handle as an integer (mpi4py: MPI._handleof(comm)), or 0 for one process without MPI
  // (a world of one rank: the engines' single-process test, one GPU).
  Distributed(const std::vector<std::tuple<std::string, nb::ndarray<>, std::optional<bool>>>& parameters, uintptr_t mpi_comm, const std::string& preset,
              nb::dict overrides, int stage, const std::string& mode, bool average_gradients, bool offload, const std::string& engine,
              nb::object collectives, bool gradients_reduced, const std::map<std::string, std::tuple<std::string, std::vector<int64_t>, int64_t>>& matrix_options,
              double max_gradient_norm, int64_t bucket_elements, nb::object base) {
    // The preset's settings, or a MuonSettings object's (a DeepSpeed config's), then the overrides.
    runtime::OptimizerSettings settings = base.is_none() ? runtime::preset_settings(preset) : settings_of(base);
    for (auto [key, value] : overrides) apply_python_setting(settings, nb::cast<std::string>(key), value);
    runtime::DistributedSettings distributed;
    distributed.stage = stage;
    distributed.mode = runtime::parse_plan_mode(mode);
    distributed.average_gradients = average_gradients;
    distributed.offload_optimizer = offload;
    distributed.gradients_reduced = gradients_reduced;
    distributed.max_gradient_norm = max_gradient_norm;
    if (bucket_elements != 0) distributed.bucket_elements = bucket_elements;  // 0: the runtime's default
    std::vector<runtime::Parameter> list;
    std::optional<bool> cuda;
    for (const auto& [name, tensor, use_muon] : parameters) {
      runtime::Parameter p;
      p.name = name;
      const TensorView view = host_or_cuda_view(tensor, "parameter '" + name + "'");
      if (cuda && *cuda != view.cuda)
        throw nb::value_error(("parameter '" + name + "' is in " + (view.cuda ? "CUDA" : "CPU") + " memory but the ones before it are not: " +
                               "orthojit.DistributedMuon takes all parameters on one device")
                                  .c_str());
      cuda = view.cuda;
      p.data = view.data;
      p.dtype = view.dtype;
      p.shape = view.shape;
      p.use_muon = use_muon;
      if (const auto options = matrix_options.find(name); options != matrix_options.end()) {
        const auto& [layout, row_splits, head_rows] = options->second;
        const std::optional<runtime::MatrixLayout> parsed = runtime::parse_matrix_layout(layout);
        if (!parsed)
          throw nb::value_error(("parameter '" + name + "': matrix option layout '" + layout + "'; expected auto, flatten, batch or trailing").c_str());
        p.layout = *parsed;
        p.row_splits = row_splits;
        p.head_rows = head_rows;
      }
      names_.push_back(name);
      list.push_back(p);
    }
    cuda_ = cuda.value_or(false);
    if (engine == "torch") {
      // A torch.distributed process group (orthojit/distributed.py wraps it): gloo for CPU
      // tensors, NCCL for CUDA tensors.
      const std::string backend = nb::cast<std::string>(collectives.attr("backend"));
      const bool cuda_group = nb::cast<bool>(collectives.attr("moves_cuda_tensors"));
      const bool host_group = nb::cast<bool>(collectives.attr("moves_cpu_tensors"));
      if (cuda_ && !cuda_group)
        throw nb::value_error(("the parameters are CUDA tensors but the process group's backend (" + backend +
                               ") moves CPU tensors: use an NCCL group (torch.distributed.init_process_group('nccl'), or 'cpu:gloo,cuda:nccl')")
                                  .c_str());
      if (!cuda_ && !host_group)
        throw nb::value_error(("the parameters are CPU tensors but the process group's backend (" + backend +
                               ") moves CUDA tensors only: use a gloo group (torch.distributed.init_process_group('gloo'), or 'cpu:gloo,cuda:nccl')")
                                  .c_str());
      torch_ = std::make_unique<TorchCommunicator>(collectives, nb::cast<int>(collectives.attr("rank")), nb::cast<int>(collectives.attr("world")), backend,
                                                   cuda_);
      communicator_ = torch_.get();
      optimizer_ = std::make_unique<runtime::DistributedOptimizer>(std::move(list), std::move(settings), distributed, *communicator_,
                                                                  cuda_ ? runtime::cuda_memory() : runtime::host_memory());
      return;
    }
    if (cuda_ && engine != "nccl")
      throw nb::value_error(("the parameters are CUDA tensors: use engine='nccl' (engine '" + engine + "' moves host memory only)").c_str());
    if (mpi_comm == 0) {
      bootstrap_ = std::make_unique<runtime::LocalCommunicator>();
    } else {
      // Open MPI's MPI_Comm is a pointer; the integer is what mpi4py's MPI._handleof returns.
#ifdef ORTHOJIT_HAVE_MPI
      bootstrap_ = std::make_unique<runtime::MpiCommunicator>(reinterpret_cast<MPI_Comm>(mpi_comm));
#else
      throw nb::value_error(("orthojit.DistributedMuon bootstraps every engine over MPI: " + runtime::mpi_unavailable_reason() +
                             " (orthojit.Muon runs one process)")
                                .c_str());
#endif
    }
    runtime::Communicator* communicator = bootstrap_.get();
    if (engine == "nccl") {
#ifdef ORTHOJIT_HAVE_NCCL
      // One GPU per rank; NCCL's unique id travels over the bootstrap communicator.
      nccl_ = runtime::NcclCommunicator::create(*bootstrap_);
      communicator = nccl_.get();
#else
      throw nb::value_error("engine 'nccl': this build has no NCCL engine (the CUDA toolkit or nccl.h was not found when it was configured)");
#endif
    } else if (engine != "mpi") {
      throw nb::value_error(("unknown engine '" + engine + "'; expected mpi, nccl or torch").c_str());
    }
    communicator_ = communicator;
    optimizer_ = std::make_unique<runtime::DistributedOptimizer>(std::move(list), std::move(settings), distributed, *communicator_,
                                                                cuda_ ? runtime::cuda_memory() : runtime::host_memory());
  }

  // stream: the CUstream (torch.cuda.current_stream().cuda_stream) of a step on CUDA tensors.
  // `missing`: parameters without a gradient this time (the runtime decides, with the other ranks,
  // what that means: zeros, or an error on every rank).
  nb::dict step(const std::vector<std::pair<std::string, nb::ndarray<>>>& gradients, bool accumulate_only, uintptr_t stream,
                const std::vector<std::string>& missing) {
    for (const std::string& name : missing) optimizer_->set_gradient(name, nullptr, runtime::DType::F32);
    for (const auto& [name, grad] : gradients) {
      const TensorView view = host_or_cuda_view(grad, "the gradient of '" + name + "'");
      if (view.cuda != cuda_)
        throw nb::value_error(("the gradient of '" + name + "' is in " + (view.cuda ? "CUDA" : "CPU") + " memory, its parameter is not").c_str());
      optimizer_->set_gradient(name, view.data, view.dtype);
    }
    void* on = reinterpret_cast<void*>(stream);
    nb::dict result;
    if (accumulate_only) {
      nb::gil_scoped_release release;
      optimizer_->accumulate_gradients(on);
      return result;
    }
    runtime::StepReport report;
    {
      nb::gil_scoped_release release;
      report = optimizer_->step(on);
    }
    result["skipped"] = report.skipped;
    result["reason"] = report.reason;
    result["muon_updated"] = report.muon_updated;
    result["adam_updated"] = report.adam_updated;
    result["orthogonalize_seconds"] = report.orthogonalize_seconds;
    if (report.gradient_norm >= 0) result["gradient_norm"] = report.gradient_norm;
    result["bytes_sent"] = optimizer_->bytes_sent_last_step();
    return result;
  }

  // torch's param_groups vocabulary: {"muon.lr": ..., "adam.beta1": ...}.
  std::map<std::string, double> hyperparameters() const {
    const runtime::StepHyperparameters h = optimizer_->hyperparameters();
    return {{"muon.lr", h.muon_lr},   {"muon.momentum", h.muon_momentum}, {"muon.weight_decay", h.muon_weight_decay},
            {"adam.lr", h.adam_lr},   {"adam.beta1", h.adam_beta1},       {"adam.beta2", h.adam_beta2},
            {"adam.eps", h.adam_eps}, {"adam.weight_decay", h.adam_weight_decay}};
  }
  void set_hyperparameters(const std::map<std::string, double>& values) {
    runtime::StepHyperparameters h = optimizer_->hyperparameters();
    const std::map<std::string, double*> fields = {{"muon.lr", &h.muon_lr},     {"muon.momentum", &h.muon_momentum}, {"muon.weight_decay", &h.muon_weight_decay},
                                                   {"adam.lr", &h.adam_lr},     {"adam.beta1", &h.adam_beta1},       {"adam.beta2", &h.adam_beta2},
                                                   {"adam.eps", &h.adam_eps},   {"adam.weight_decay", &h.adam_weight_decay}};
    for (const auto& [key, value] : values) {
      const auto field = fields.find(key);
      if (field == fields.end()) throw nb::value_error(("unknown step hyperparameter '" + key + "'").c_str());
      *field->second = value;
    }
    optimizer_->set_hyperparameters(h);
  }

  // The whole state on every rank, or on `root` only (collective): {name: {"momentum_buffer" |
  // "exp_avg", "exp_avg_sq": flat f32 torch tensors, "step": int}} (empty on the other ranks) and
  // the steps taken.
  std::pair<nb::dict, int64_t> gather_state(std::optional<int> root) {
    std::map<std::string, runtime::HybridOptimizer::State> state;
    {
      nb::gil_scoped_release release;
      state = optimizer_->gather_state(root);
    }
    auto tensor = [](std::vector<float>& values) {
      auto* owned = new std::vector<float>(std::move(values));
      nb::capsule owner(owned, [](void* pointer) noexcept { delete static_cast<std::vector<float>*>(pointer); });
      const size_t dims[1] = {owned->size()};
      return nb::cast(nb::ndarray<nb::pytorch, float>(owned->data(), 1, dims, owner));
    };
    nb::dict result;
    for (auto& [name, values] : state) {
      nb::dict entry;
      if (!values.exp_avg.empty() || values.momentum.empty()) {
        entry["exp_avg"] = tensor(values.exp_avg);
        entry["exp_avg_sq"] = tensor(values.exp_avg_sq);
        entry["step"] = values.step;
      } else {
        entry["momentum_buffer"] = tensor(values.momentum);
      }
      result[name.c_str()] = entry;
    }
    return {result, optimizer_->steps_taken()};
  }

  // `state` as gather_state returns it (CPU f32 tensors, flat or shaped); checked on every rank,
  // loaded on every rank or on none (collective).
  void load_state(nb::dict state, int64_t steps_taken) {
    std::map<std::string, runtime::HybridOptimizer::State> loaded;
    for (auto [key, value] : state) {
      const std::string name = nb::cast<std::string>(key);
      runtime::HybridOptimizer::State& values = loaded[name];
      nb::dict entry = nb::cast<nb::dict>(value);
      auto take = [&](const char* field, std::vector<float>& into) {
        if (!entry.contains(field)) return;
        const TensorView view = tensor_view(nb::cast<nb::ndarray<>>(entry[field]), "'" + name + "." + field + "'", true);
        const float* data = static_cast<const float*>(view.data);
        into.assign(data, data + view.count);
      };
      take("momentum_buffer", values.momentum);
      take("exp_avg", values.exp_avg);
      take("exp_avg_sq", values.exp_avg_sq);
      if (entry.contains("step")) values.step = nb::cast<int64_t>(entry["step"]);
    }
    nb::gil_scoped_release release;
    optimizer_->load_state(loaded, steps_taken);
  }

  // The state file, streamed (DistributedOptimizer::save_state / load_state(path)); collective.
  void save_state_file(const std::string& path, const std::map<std::string, std::string>& metadata, nb::handle progress) {
    const runtime::FileProgressCallback callback = python_progress(progress);
    nb::gil_scoped_release release;
    optimizer_->save_state(path, metadata, callback);
  }
  void require_on_every_rank(const std::string& problem, const std::string& doing) {
    nb::gil_scoped_release release;
    optimizer_->require_on_every_rank(problem, doing);
  }
  int64_t load_state_file(const std::string& path, const std::string& refusal, nb::handle progress) {
    const runtime::FileProgressCallback callback = python_progress(progress);
    nb::gil_scoped_release release;
    optimizer_->load_state(path, refusal, callback);
    return optimizer_->steps_taken();
  }

  void qk_clip(const std::string& q_name, const std::string& k_name, int64_t head_rows, const std::vector<double>& s_max, double tau) {
    nb::gil_scoped_release release;
    optimizer_->qk_clip(q_name, k_name, head_rows, s_max, tau);
  }

  // {name: True/False}: which parameters Muon takes (the tagging rule and use_muon).
  std::vector<std::pair<std::string, bool>> muon_tags() const {
    std::vector<std::pair<std::string, bool>> tags;
    for (const runtime::PlannedTensor& tensor : optimizer_->plan().tensors) tags.emplace_back(tensor.tensor.name, tensor.tensor.muon);
    return tags;
  }

  void gather_parameters(uintptr_t stream) {
    nb::gil_scoped_release release;
    optimizer_->gather_parameters(reinterpret_cast<void*>(stream));
  }
  int rank() const { return communicator_->rank(); }
  int world() const { return communicator_->world(); }
  int64_t memory_bytes() const { return optimizer_->memory_bytes(); }
  bool cuda() const { return cuda_; }
  std::string describe() const { return communicator_->describe(); }
  std::string plan_json() const { return runtime::plan_record("parameters", optimizer_->plan()).dump(); }

 private:
  std::vector<std::string> names_;
  bool cuda_ = false;
  std::unique_ptr<runtime::Communicator> bootstrap_;
  std::unique_ptr<TorchCommunicator> torch_;
#ifdef ORTHOJIT_HAVE_NCCL
  std::unique_ptr<runtime::NcclCommunicator> nccl_;
#endif
  runtime::Communicator* communicator_ = nullptr;
  std::unique_ptr<runtime::DistributedOptimizer> optimizer_;
};

}  // namespace

void register_zero(nb::module_& module) {
  nb::class_<Distributed>(module, "Distributed", "Distributed Muon + AdamW with ZeRO over an MPI communicator (orthojit.DistributedMuon wraps it).")
      .def(nb::init<const std::vector<std::tuple<std::string, nb::ndarray<>, std::optional<bool>>>&, uintptr_t, const std::string&,
                    nb::dict, int, const std::string&, bool, bool, const std::string&, nb::object, bool,
                    const std::map<std::string, std::tuple<std::string, std::vector<int64_t>, int64_t>>&, double, int64_t, nb::object>(),
           nb::arg("parameters"), nb::arg("mpi_comm"), nb::arg("preset"), nb::arg("overrides"), nb::arg("stage"), nb::arg("mode"), nb::arg("average_gradients"),
           nb::arg("offload"), nb::arg("engine") = "mpi", nb::arg("collectives") = nb::none(), nb::arg("gradients_reduced") = false,
           nb::arg("matrix_options") = std::map<std::string, std::tuple<std::string, std::vector<int64_t>, int64_t>>{}, nb::arg("max_gradient_norm") = 0.0, nb::arg("bucket_elements") = 0, nb::arg("base") = nb::none())
      .def("step", &Distributed::step, nb::arg("gradients"), nb::arg("accumulate_only") = false, nb::arg("stream") = 0,
           nb::arg("missing") = std::vector<std::string>{})
      .def("gather_parameters", &Distributed::gather_parameters, nb::arg("stream") = 0)
      .def("hyperparameters", &Distributed::hyperparameters)
      .def("set_hyperparameters", &Distributed::set_hyperparameters, nb::arg("values"))
      .def("gather_state", &Distributed::gather_state, nb::arg("root") = nb::none())
      .def("load_state", &Distributed::load_state, nb::arg("state"), nb::arg("steps_taken"))
      .def("save_state_file", &Distributed::save_state_file, nb::arg("path"), nb::arg("metadata"), nb::arg("progress") = nb::none())
      .def("load_state_file", &Distributed::load_state_file, nb::arg("path"), nb::arg("refusal") = "", nb::arg("progress") = nb::none())
      .def("require_on_every_rank", &Distributed::require_on_every_rank, nb::arg("problem"), nb::arg("doing"))
      .def("muon_tags", &Distributed::muon_tags)
      .def("qk_clip", &Distributed::qk_clip, nb::arg("q_name"), nb::arg("k_name"), nb::arg("head_rows"), nb::arg("s_max"), nb::arg("tau"))
      .def_prop_ro("cuda", &Distributed::cuda)
      .def_prop_ro("rank", &Distributed::rank)
      .def_prop_ro("world", &Distributed::world)
      .def_prop_ro("memory_bytes", &Distributed::memory_bytes)
      .def("describe", &Distributed::describe)
      .def("plan_json", &Distributed::plan_json);
  module.def(
      "deepspeed_distributed_settings",
      [](const std::string& json_text, const std::string& origin) {
        runtime::DistributedSettings settings = runtime::distributed_settings(runtime::parse_deepspeed_config_text(json_text, origin));
        nb::dict result;
        result["stage"] = settings.stage;
        result["offload"] = settings.offload_optimizer;
        result["max_gradient_norm"] = settings.max_gradient_norm;
        result["bucket_elements"] = settings.bucket_elements;
        return result;
      },
      nb::arg("json_text"), nb::arg("origin") = "the DeepSpeed configuration",
      "{stage, offload, max_gradient_norm, bucket_elements} from a DeepSpeed config's zero_optimization (stage, offload_optimizer, "
      "reduce_bucket_size) and gradient_clipping (runtime/zero/distributed_optimizer.h).");
  module.def("plan", &plan, nb::arg("model"), nb::arg("model_is_json"), nb::arg("world"), nb::arg("stage"), nb::arg("mode") = "deepspeed",
             nb::arg("alignment") = 1, nb::arg("per_head") = false, nb::arg("parameter_bytes") = 2, nb::arg("gradient_bytes") = 2,
             "`orthojit plan --json`: the ZeRO partition plan of a model for `world` ranks; returns JSON text.");
}

}  // namespace orthojit::python
