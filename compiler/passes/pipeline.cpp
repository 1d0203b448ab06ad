// The pass pipeline.
#include "passes/pipeline.h"

#include "ir/lower_program.h"
#include "ir/verifier.h"
#include "passes/passes.h"

namespace orthojit::passes {

const std::vector<PassInfo>& pass_list() {
  static const std::vector<PassInfo> passes = {
      {"lower", "the program unrolled over its steps, symbolic m x n, primitive ops"},
      {"attach_muon_step", "a Muon step: momentum after the gradient, the parameter update in place of the output"},
      {"specialize_shapes", "m, n and the batch become constants"},
      {"orient", "a tall input runs on its transpose"},
      {"canonicalize", "scalars folded into products, sums flattened"},
      {"recognize_odd_polynomial", "each step annotated with p where X <- p(X·Xᵀ)·X"},
      {"apply_strategy", "standard keeps the statements; gram rewrites the steps on R = X·Xᵀ"},
      {"infer_symmetry", "symmetric values marked (X·Xᵀ, polynomials in one symmetric matrix)"},
      {"fuse_epilogues", "lincombs fused into D = α·A·B + β·C + γ·I"},
      {"assign_precision", "stored and accumulate types from the precision policy"},
      {"fuse_update_rules", "the Muon step's momentum into the normalize, its update into the last kernel"},
      {"plan_buffers", "storage slots by liveness; C and D never alias"},
  };
  return passes;
}

dsl::PrecisionPolicy effective_policy(const dsl::PrecisionPolicy& policy, std::optional<ScalarType> precision) {
  dsl::PrecisionPolicy result = policy;
  if (!precision) return result;
  result.storage = *precision;
  if (*precision == ScalarType::F64) {
    result.accumulate = ScalarType::F64;
    result.norm = ScalarType::F64;
  } else if (*precision == ScalarType::F32) {
    result.accumulate = ScalarType::F32;
  }
  return result;
}

ir::Function compile_program(const dsl::Program& program, const CompileOptions& options, const PassObserver& observer) {
  ir::Function function = ir::lower_program(program);
  function.policy = effective_policy(program.policy, options.precision);
  function.strategy.kind = options.strategy;
  if (options.gram_restarts) {
    // Checked whatever the strategy: with `auto`, restarts outside the schedule were accepted
    // silently whenever the standard strategy was chosen (the gram strategy checks them again).
    const int steps = static_cast<int>(program.steps.size());
    for (int restart : *options.gram_restarts)
      if (restart < 1 || restart >= steps)
        throw CompileError({}, "gram restart at step " + std::to_string(restart) + " is outside 1.." + std::to_string(steps - 1) + " (" + program.name +
                                   " has " + std::to_string(steps) + " steps; a restart happens before the step with that index)");
    function.strategy.gram_restarts = *options.gram_restarts;
  }
  function.strategy.triangular_products = options.triangular_products;

  auto finish = [&](const std::string& name) {
    if (name != "lower") function.applied_passes.push_back(name);
    ir::verify_function(function, name);
    if (observer) observer(name, function);
  };
  finish("lower");
  if (options.muon_step) {
    attach_muon_step(function, *options.muon_step);
    finish("attach_muon_step");
  }
  specialize_shapes(function, options.rows, options.cols, options.batch);
  finish("specialize_shapes");
  orient(function);
  finish("orient");
  canonicalize(function);
  finish("canonicalize");
  recognize_odd_polynomial(function);
  finish("recognize_odd_polynomial");
  apply_strategy(function);
  finish("apply_strategy");
  infer_symmetry(function);
  finish("infer_symmetry");
  fuse_epilogues(function);
  finish("fuse_epilogues");
  assign_precision(function);
  finish("assign_precision");
  if (function.muon_step) {
    fuse_update_rules(function, options.fuse_update);
    finish("fuse_update_rules");
  }
  plan_buffers(function);
  finish("plan_buffers");
  return function;
}

}  // namespace orthojit::passes
