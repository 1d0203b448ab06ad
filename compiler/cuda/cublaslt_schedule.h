// The cuBLASLt Newton–Schulz baseline as data: the sequence of cublasLtMatmul calls (and the few
// diagonal adds) one iteration makes, per matrix of the batch, with every operand, transposition,
// α, β and C/D buffer spelled out. The device runner (cublaslt_newton_schulz.h) executes exactly
// this list; tests/cublaslt_schedule_test.cpp executes it in f64 on the host and compares with the
// Newton–Schulz formula, so a wrong β, operand or buffer is caught without a GPU.
//
// cuBLASLt is column-major: the oriented row-major m x n X (m <= n; a tall input is transposed
// first) is, as stored, the column-major n x m matrix Xc = Xᵀ, and a row-major product U·V is the
// column-major product Vc·Uc. Every buffer is described as cuBLASLt sees it (column-major, its
// leading dimension its row count); batched matrices are `batch` such buffers at a fixed stride.
//
// Standard (per step with X ← (a + b·A + c·A²)·X):
//     A = X·Xᵀ                         Ac  = Xcᵀ·Xc                       (β = 0)
//     B = b·A + c·A·A                  Bc  = c·Ac·Ac + b·Ac,  C = A, D = B
//     X' = a·X + B·X                   X'c = Xc·Bc + a·Xc,    C = X, D = X' (the other X buffer)
// Gram (compiler/passes/apply_strategy.cpp's schedule and restart rule, per step p_k(R)):
//     R = X·Xᵀ; Q = none
//     for k: if k is a restart: X ← Q·X; R ← X·Xᵀ; Q ← none
//            Z = p_k(R): Z = c·R·R + b·R (C = R, β = b), then + a·I (diagonal add; no cuBLASLt
//                epilogue adds γ·I), then Horner for higher degrees Z ← Z·R + p_j·I (C = I, β = p_j)
//            Q = Z if none else Q·Z
//            if the next step continues (k+1 exists and is no restart): R ← Z·(R·Z)
//     X_out = Q·X
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orthojit::cuda {

// One per-matrix buffer, column-major rows x cols (leading dimension = rows).
struct LtBuffer {
  std::string name;  // "X0", "S2", "I"
  int64_t rows = 0, cols = 0;
  bool identity = false;  // filled with I once (the C of Horner's Z·R + p_j·I); never written
};

struct LtOp {
  enum class Kind { Matmul, AddIdentity } kind = Kind::Matmul;
  // Matmul: D = α·op(A)·op(B) + β·C; D is m x n, op(A) m x k, op(B) k x n (cuBLASLt's m, n, k).
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0;
  int a = -1, b = -1, c = -1, d = -1;  // buffer indices; c = -1: no C term (β = 0)
  double alpha = 1.0, beta = 0.0;
  double gamma = 0.0;  // AddIdentity: buffer d += gamma·I
  std::string what;    // "step 1: B = b·A + c·A·A"
};

struct LtSchedule {
  int64_t m = 0, n = 0;    // oriented rows and cols (m <= n)
  bool transpose = false;  // the input is tall: it is worked on transposed
  std::vector<LtBuffer> buffers;
  std::vector<LtOp> ops;
  int input = -1;   // buffer the normalized, oriented X is written to (row-major m x n = column-major n x m)
  int output = -1;  // buffer holding the result, same layout
  std::string describe() const;  // one line per op
};

// The standard iteration: per step the coefficients [a, b, c] (a shorter polynomial is padded
// with zeros; more than three coefficients is not of this form and throws std::invalid_argument).
LtSchedule standard_lt_schedule(int64_t rows, int64_t cols, const std::vector<std::vector<double>>& polynomials);
// Gram: per step p_k = [p0, p1, ..., pd] (Z = p0·I + p1·R + ... + pd·R^d); `restarts` the steps
// before which the iteration restarts (1 .. steps-1, as the compiler's gram_restarts).
LtSchedule gram_lt_schedule(int64_t rows, int64_t cols, const std::vector<std::vector<double>>& polynomials, const std::vector<int>& restarts);

}  // namespace orthojit::cuda
