// The lowering pipeline, top to bottom: program -> IR -> passes -> scheduled IR. Read it like
// Halide's Lower.cpp; an observer sees the IR after every pass (--dump-after).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "ir/function.h"

namespace orthojit::passes {

struct CompileOptions {
  int64_t rows = 0, cols = 0, batch = 1;
  ir::StrategyKind strategy = ir::StrategyKind::Standard;
  std::optional<std::vector<int>> gram_restarts;  // default: the program's (itself default [2])
  std::optional<ScalarType> precision;            // overrides the program's storage type; f64 = exact iteration
  bool triangular_products = true;
  // Set: compile a Muon step (momentum, the iteration, the parameter update) instead of an
  // orthogonalizer. fuse_update: the update in the last kernel's epilogue (cuda); the cpu backend
  // runs it as its own pass.
  std::optional<ir::MuonStepSpec> muon_step;
  bool fuse_update = true;
};

struct PassInfo {
  std::string name;
  std::string summary;
};

// "lower" (the program as lowered, before any pass) followed by the passes in order.
const std::vector<PassInfo>& pass_list();

// The program's policy with `precision` applied: f64 makes every type f64 (the exact iteration);
// f32 makes storage and accumulate f32; bf16/f16 replace the storage type.
dsl::PrecisionPolicy effective_policy(const dsl::PrecisionPolicy& policy, std::optional<ScalarType> precision);

using PassObserver = std::function<void(const std::string& pass_name, const ir::Function& after)>;

// Runs lowering and every pass, verifying the IR after each. Throws CompileError for user errors.
ir::Function compile_program(const dsl::Program& program, const CompileOptions& options, const PassObserver& observer = {});

}  // namespace orthojit::passes
