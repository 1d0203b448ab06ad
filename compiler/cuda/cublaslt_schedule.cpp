// The cuBLASLt Newton–Schulz schedules (see cublaslt_schedule.h).
#include "cuda/cublaslt_schedule.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace orthojit::cuda {
namespace {

// Builds a schedule: the two X buffers (column-major n x m) and a pool of m x m buffers reused
// once their value is dead (cuBLASLt's D may equal C but never A or B, so every product whose
// result replaces an operand writes a different buffer).
class Builder {
 public:
  Builder(int64_t rows, int64_t cols) {
    s_.transpose = rows > cols;
    s_.m = std::min(rows, cols);
    s_.n = std::max(rows, cols);
    if (s_.m < 1) throw std::invalid_argument("the cuBLASLt Newton–Schulz baseline needs a positive shape");
    s_.buffers.push_back({"X0", s_.n, s_.m, false});
    s_.buffers.push_back({"X1", s_.n, s_.m, false});
    busy_ = {true, false};
    s_.input = 0;
  }
  int64_t m() const { return s_.m; }
  int64_t n() const { return s_.n; }

  int other_x(int x) const { return x == 0 ? 1 : 0; }
  int square() {
    for (size_t i = 2; i < s_.buffers.size(); ++i)
      if (!busy_[i] && !s_.buffers[i].identity) {
        busy_[i] = true;
        return static_cast<int>(i);
      }
    s_.buffers.push_back({"S" + std::to_string(s_.buffers.size() - 2), s_.m, s_.m, false});
    busy_.push_back(true);
    return static_cast<int>(s_.buffers.size() - 1);
  }
  int identity() {
    for (size_t i = 2; i < s_.buffers.size(); ++i)
      if (s_.buffers[i].identity) return static_cast<int>(i);
    s_.buffers.push_back({"I", s_.m, s_.m, true});
    busy_.push_back(true);
    return static_cast<int>(s_.buffers.size() - 1);
  }
  void release(int buffer) {
    if (buffer >= 0 && !s_.buffers[static_cast<size_t>(buffer)].identity) busy_[static_cast<size_t>(buffer)] = false;
  }

  // D = α·op(A)·op(B) + β·C with the dimensions taken from the buffers.
  void matmul(bool transa, bool transb, int a, int b, int d, double alpha, int c, double beta, std::string what) {
    const LtBuffer& A = s_.buffers[static_cast<size_t>(a)];
    const LtBuffer& B = s_.buffers[static_cast<size_t>(b)];
    LtOp op;
    op.transa = transa;
    op.transb = transb;
    op.m = transa ? A.cols : A.rows;
    op.k = transa ? A.rows : A.cols;
    op.n = transb ? B.rows : B.cols;
    op.a = a;
    op.b = b;
    op.c = beta == 0.0 ? -1 : c;
    op.d = d;
    op.alpha = alpha;
    op.beta = op.c < 0 ? 0.0 : beta;
    op.what = std::move(what);
    s_.ops.push_back(std::move(op));
  }
  void add_identity(int d, double gamma, std::string what) {
    if (gamma == 0.0) return;
    LtOp op;
    op.kind = LtOp::Kind::AddIdentity;
    op.d = d;
    op.m = op.n = s_.m;
    op.gamma = gamma;
    op.what = std::move(what);
    s_.ops.push_back(std::move(op));
  }
  // R = X·Xᵀ (Rc = Xcᵀ·Xc) into a fresh m x m buffer.
  int gram_of(int x, const std::string& step) {
    const int r = square();
    matmul(true, false, x, x, r, 1.0, -1, 0.0, step + "R = X·Xᵀ");
    return r;
  }
  LtSchedule finish(int output) {
    s_.output = output;
    return std::move(s_);
  }

 private:
  LtSchedule s_;
  std::vector<bool> busy_;
};

std::string step_prefix(size_t k) { return "step " + std::to_string(k) + ": "; }

}  // namespace

std::string LtSchedule::describe() const {
  std::string text;
  char line[512];
  for (const LtOp& op : ops) {
    auto name = [&](int buffer) { return buffer < 0 ? std::string("-") : buffers[static_cast<size_t>(buffer)].name; };
    if (op.kind == LtOp::Kind::AddIdentity)
      std::snprintf(line, sizeof line, "%-28s %s += %.6g·I\n", op.what.c_str(), name(op.d).c_str(), op.gamma);
    else
      std::snprintf(line, sizeof line, "%-28s %s = %.6g·%s%s·%s%s + %.6g·%s  (m %lld n %lld k %lld)\n", op.what.c_str(), name(op.d).c_str(), op.alpha,
                    name(op.a).c_str(), op.transa ? "ᵀ" : "", name(op.b).c_str(), op.transb ? "ᵀ" : "", op.beta, name(op.c).c_str(),
                    static_cast<long long>(op.m), static_cast<long long>(op.n), static_cast<long long>(op.k));
    text += line;
  }
  return text;
}

LtSchedule standard_lt_schedule(int64_t rows, int64_t cols, const std::vector<std::vector<double>>& polynomials) {
  Builder build(rows, cols);
  int x = 0;
  const int a_buffer = build.square(), b_buffer = build.square();
  for (size_t k = 0; k < polynomials.size(); ++k) {
    const std::vector<double>& p = polynomials[k];
    if (p.empty() || p.size() > 3)
      throw std::invalid_argument("step " + std::to_string(k) + " has " + std::to_string(p.size()) +
                                  " coefficients; the standard cuBLASLt baseline computes X ← (a + b·A + c·A²)·X");
    const double a = p[0], b = p.size() > 1 ? p[1] : 0.0, c = p.size() > 2 ? p[2] : 0.0;
    const std::string step = step_prefix(k);
    const int x_next = build.other_x(x);
    build.matmul(true, false, x, x, a_buffer, 1.0, -1, 0.0, step + "A = X·Xᵀ");
    build.matmul(false, false, a_buffer, a_buffer, b_buffer, c, a_buffer, b, step + "B = b·A + c·A·A");
    build.matmul(false, false, x, b_buffer, x_next, 1.0, x, a, step + "X = a·X + B·X");
    x = x_next;
  }
  return build.finish(x);
}

LtSchedule gram_lt_schedule(int64_t rows, int64_t cols, const std::vector<std::vector<double>>& polynomials, const std::vector<int>& restarts) {
  const int steps = static_cast<int>(polynomials.size());
  if (steps == 0) throw std::invalid_argument("the gram cuBLASLt baseline needs at least one step");
  for (int restart : restarts)
    if (restart < 1 || restart >= steps)
      throw std::invalid_argument("gram restart at step " + std::to_string(restart) + " is outside 1.." + std::to_string(steps - 1));
  auto is_restart = [&](int k) { return std::find(restarts.begin(), restarts.end(), k) != restarts.end(); };
  Builder build(rows, cols);
  int x = 0;
  int r = build.gram_of(x, step_prefix(0));
  int q = -1;
  for (int k = 0; k < steps; ++k) {
    const std::string step = step_prefix(static_cast<size_t>(k));
    if (k > 0 && is_restart(k)) {
      // X ← Q·X (X'c = Xc·Qc), then R from the new X.
      const int x_next = build.other_x(x);
      build.matmul(false, false, x, q, x_next, 1.0, -1, 0.0, step + "X = Q·X (restart)");
      x = x_next;
      build.release(q);
      build.release(r);
      q = -1;
      r = build.gram_of(x, step);
    }
    std::vector<double> p = polynomials[static_cast<size_t>(k)];
    if (p.empty()) throw std::invalid_argument("step " + std::to_string(k) + " has no polynomial");
    while (p.size() < 3) p.push_back(0.0);
    const size_t degree = p.size() - 1;
    // Z = p_d·R·R + p_{d-1}·R + p_{d-2}·I, then Z ← Z·R + p_j·I (Zc ← Rc·Zc + p_j·I).
    int z = build.square();
    build.matmul(false, false, r, r, z, p[degree], r, p[degree - 1], step + "Z = c·R·R + b·R");
    build.add_identity(z, p[degree - 2], step + "Z += a·I");
    for (size_t j = degree - 2; j-- > 0;) {
      const int next = build.square();
      build.matmul(false, false, r, z, next, 1.0, p[j] == 0.0 ? -1 : build.identity(), p[j], step + "Z = Z·R + p·I");
      build.release(z);
      z = next;
    }
    // Q = Q·Z (Q'c = Zc·Qc); Q = Z aliases Z's buffer.
    if (q < 0) q = z;
    else {
      const int next = build.square();
      build.matmul(false, false, z, q, next, 1.0, -1, 0.0, step + "Q = Q·Z");
      build.release(q);
      q = next;
    }
    if (k + 1 < steps && !is_restart(k + 1)) {
      // R ← Z·(R·Z): Tc = Zc·Rc, then R'c = Tc·Zc into R's buffer once R is read.
      const int t = build.square();
      build.matmul(false, false, z, r, t, 1.0, -1, 0.0, step + "T = R·Z");
      build.release(r);
      r = build.square();
      build.matmul(false, false, t, z, r, 1.0, -1, 0.0, step + "R = Z·T");
      build.release(t);
    }
    if (z != q) build.release(z);
  }
  // X_out = Q·X (Xc_out = Xc·Qc).
  const int out = build.other_x(x);
  build.matmul(false, false, x, q, out, 1.0, -1, 0.0, step_prefix(static_cast<size_t>(steps - 1)) + "X = Q·X");
  return build.finish(out);
}

}  // namespace orthojit::cuda
