// orthojit._orthojit, the ZeRO part: the partition planner (`orthojit plan --json`, cli/records.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings/python/bindings.h"
#include "cli/model_config.h"
#include "cli/records.h"
#include "runtime/zero/model_layout.h"
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
  settings.mode = cli::parse_plan_mode(mode);
  settings.alignment = alignment;
  settings.parameter_bytes = parameter_bytes;
  settings.gradient_bytes = gradient_bytes;
  autotune::ModelShapeOptions options;
  options.per_head = per_head;
  const std::string label = model_is_json ? "model (dict)" : model;
  const autotune::ModelShapes shapes =
      model_is_json ? cli::parse_model_matrices(model, "model_config (dict)", options) : cli::load_model_matrices(model, options);
  return cli::plan_record(label, runtime::plan_partitions(runtime::model_plan_tensors(shapes), settings)).dump();
}

}  // namespace

void register_zero(nb::module_& module) {
  module.def("plan", &plan, nb::arg("model"), nb::arg("model_is_json"), nb::arg("world"), nb::arg("stage"), nb::arg("mode") = "deepspeed",
             nb::arg("alignment") = 1, nb::arg("per_head") = false, nb::arg("parameter_bytes") = 2, nb::arg("gradient_bytes") = 2,
             "`orthojit plan --json`: the ZeRO partition plan of a model for `world` ranks; returns JSON text.");
}

}  // namespace orthojit::python
