// The passes, each a function IR -> IR (in place), each tested alone (tests/passes_test.cpp).
// compile_program() in pipeline.h runs them in this order.
#pragma once

#include <cstdint>

#include "ir/function.h"

namespace orthojit::passes {

// Makes the function a Muon step (ir/muon_step.h): a momentum op after the gradient input, the
// output replaced by the parameter update. Throws std::invalid_argument for a spec it cannot run.
void attach_muon_step(ir::Function& function, const ir::MuonStepSpec& spec);

// m, n, batch become constants. Throws CompileError for a non-positive size.
void specialize_shapes(ir::Function& function, int64_t rows, int64_t cols, int64_t batch);

// A tall input (m > n) runs on its transpose (so products are on the small m x m side) and the
// result is transposed back: transposes are inserted after the input and before the output.
void orient(ir::Function& function);

// Folds scalar multiples: into gemm's α, nested lincombs flattened, unit lincombs removed,
// repeated terms merged. Leaves only ops the later passes pattern-match.
void canonicalize(ir::Function& function);

// Annotates each step with p when it has the form X ← p(X·Xᵀ)·X, else with the statement that
// prevents it (and why).
void recognize_odd_polynomial(ir::Function& function);

// Rewrites the steps for the function's strategy. standard: unchanged. gram: Gram Newton–Schulz
// on R = X·Xᵀ with Q accumulated and restarts; throws CompileError naming the blocking statement
// when a step is not odd-polynomial.
void apply_strategy(ir::Function& function);

// Marks symmetric values: X·Xᵀ, and sums and products of polynomials in one symmetric matrix
// (they commute, so their products are symmetric too).
void infer_symmetry(ir::Function& function);

// Fuses lincombs of one single-use product into the product's epilogue:
// α·A·B + β·C + γ·I becomes one gemm (covers b·A + c·A², a·X + B·X, Z + a·I).
void fuse_epilogues(ir::Function& function);

// Stored type of every value and the accumulate type of every product from the policy.
void assign_precision(ir::Function& function);

// A Muon step's momentum fused into its normalize, and (fuse_update) its update into the epilogue
// of the op that makes the last X; no effect on an orthogonalizer.
void fuse_update_rules(ir::Function& function, bool fuse_update);

// Storage slots by liveness (ping-pong for X); a product's result never shares a slot with any of
// its operands (so C and D never alias).
void plan_buffers(ir::Function& function);

}  // namespace orthojit::passes
