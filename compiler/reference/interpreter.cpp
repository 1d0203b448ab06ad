// Reference interpreter. Loops are plain and packed for contiguous dot products; clarity first,
// but fast enough for the demo and tests (a 256 x 1024 bf16 Newton–Schulz takes about a second).
#include "reference/interpreter.h"

#include "ir/norm_scale.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "support/rounding.h"

namespace orthojit::reference {
namespace {

// A strided window on f64 storage: element (i, j) at data[i*row_stride + j*col_stride].
struct View {
  double* data = nullptr;
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 1;
  double& at(int64_t i, int64_t j) const { return data[i * row_stride + j * col_stride]; }
  View transposed() const { return {data, cols, rows, col_stride, row_stride}; }
};

// Rounds as a kernel stores: the arithmetic result in the accumulate type, then the storage type.
double store(const ir::Node& node, double value) { return round_to(node.type, round_to(node.accumulate, value)); }

class Interpreter {
 public:
  Interpreter(const ir::Function& function, const ProductHook& products) : function_(function), products_(products) {
    if (!function.input_shape.is_known()) throw std::logic_error("interpret: the IR is not shape-specialized");
    const bool planned = !function.buffers.empty();
    if (planned) {
      for (const auto& buffer : function.buffers) slots_.emplace_back(static_cast<size_t>(buffer.elements));
    }
    views_.resize(function.nodes.size());
    node_slot_.assign(function.nodes.size(), -1);
    // Values a Muon step computes without storage: a fused momentum, the last X of a fused update.
    std::vector<bool> unstored(function.nodes.size(), false);
    for (size_t i = 0; i < function.nodes.size(); ++i) {
      const ir::Node& node = function.nodes[i];
      if (node.kind == ir::OpKind::Momentum && node.fused) unstored[i] = true;
      if (node.kind == ir::OpKind::Update) {
        ir::NodeId root = node.operands[0];
        while (function.node(root).kind == ir::OpKind::Transpose) root = function.node(root).operands[0];
        if (node.fused) unstored[static_cast<size_t>(root)] = true;
      }
    }
    for (size_t i = 0; i < function.nodes.size(); ++i) {
      const ir::Node& node = function.nodes[i];
      if (node.kind == ir::OpKind::Transpose) continue;
      if (node.kind == ir::OpKind::Input || node.kind == ir::OpKind::Output || node.kind == ir::OpKind::Update || unstored[i] || !planned) {
        node_slot_[i] = static_cast<int>(slots_.size());
        slots_.emplace_back(static_cast<size_t>(node.shape.elements()));
      } else {
        if (node.buffer < 0) throw std::logic_error("interpret: planned IR has a value without a buffer");
        node_slot_[i] = node.buffer;
      }
    }
  }

  void run(const double* input, double* output) { run(input, output, nullptr); }

  // `io` set: a Muon step on that matrix (input and output unused).
  void run(const double* input, double* output, const ir::MuonStepMatrix* io) {
    for (size_t i = 0; i < function_.nodes.size(); ++i) {
      const ir::Node& node = function_.nodes[i];
      if (node.kind == ir::OpKind::Transpose) {
        views_[i] = views_[static_cast<size_t>(node.operands[0])].transposed();
        continue;
      }
      View out{slots_[static_cast<size_t>(node_slot_[i])].data(), node.shape.rows.size, node.shape.cols.size, node.shape.cols.size, 1};
      views_[i] = out;
      switch (node.kind) {
        case ir::OpKind::Input:
          if (io) {
            for (int64_t k = 0; k < node.shape.elements(); ++k) out.data[k] = ir::load_stored(node.type, reinterpret_cast<const void*>(io->grad), k);
          } else {
            for (int64_t k = 0; k < node.shape.elements(); ++k) out.data[k] = round_to(node.type, input[k]);
          }
          break;
        case ir::OpKind::Momentum: momentum(node, operand(node, 0), out, *io); break;
        case ir::OpKind::Update: update(node, operand(node, 0), *io); break;
        case ir::OpKind::Normalize: normalize(node, operand(node, 0), out); break;
        case ir::OpKind::Gemm: gemm(node, out); break;
        case ir::OpKind::LinComb: lincomb(node, out); break;
        case ir::OpKind::Output: {
          const View source = operand(node, 0);
          for (int64_t r = 0; r < out.rows; ++r)
            for (int64_t c = 0; c < out.cols; ++c) output[r * out.cols + c] = round_to(node.type, source.at(r, c));
          break;
        }
        case ir::OpKind::Transpose: break;
      }
    }
  }

  // The Muon momentum on g's view; M lies like g (the same offsets from its own base).
  void momentum(const ir::Node& node, const View& g, const View& out, const ir::MuonStepMatrix& io) {
    const ir::MuonStepSpec& spec = *function_.muon_step;
    float* state = reinterpret_cast<float*>(io.momentum);
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c) {
        const int64_t offset = r * g.row_stride + c * g.col_stride;
        // g is read into f32 first, as the host rules and kernels read it (exact for bf16, f16).
        const double gradient = static_cast<float>(g.at(r, c));
        const float next = ir::muon_momentum_next(spec.ema, io.beta, gradient, state[offset]);
        state[offset] = next;
        out.at(r, c) = round_to(node.type, ir::muon_update_value(spec.ema, spec.nesterov, io.beta, gradient, next));
      }
  }

  // p ← p·decay − step·O in the user's layout, O the last X rounded to f32.
  void update(const ir::Node& node, const View& x, const ir::MuonStepMatrix& io) {
    void* param = reinterpret_cast<void*>(io.param);
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t c = 0; c < x.cols; ++c) {
        const int64_t index = r * x.cols + c;
        const float orthogonal = static_cast<float>(x.at(r, c));
        ir::store_rounded(node.type, param, index, ir::muon_parameter_next(ir::load_stored(node.type, param, index), io.decay, io.step, orthogonal));
      }
  }

 private:
  View operand(const ir::Node& node, size_t k) const { return views_[static_cast<size_t>(node.operands[k])]; }

  void normalize(const ir::Node& node, const View& x, const View& out) {
    // Scaled by a power of two as every backend does (ir/norm_scale.h): the same values where
    // the unscaled norm is representable, the right ones where it would overflow or underflow
    // the norm type.
    double largest = 0;
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t c = 0; c < x.cols; ++c) largest = std::isnan(x.at(r, c)) || std::isnan(largest) ? NAN : std::max(largest, std::fabs(x.at(r, c)));
    const double scale = ir::norm_scale(largest, node.norm_type == ScalarType::F64 && node.type == ScalarType::F64 ? 1022 : 126);
    if (node.normalization.kind == dsl::Normalization::Kind::Aol) {
      aol_normalize(node, x, out, scale);
      return;
    }
    double sum_of_squares = 0.0;
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t c = 0; c < x.cols; ++c) sum_of_squares += (x.at(r, c) * scale) * (x.at(r, c) * scale);
    const ScalarType t = node.norm_type;
    const double norm = round_to(t, std::sqrt(sum_of_squares));
    const double scaled = round_to(t, norm * node.normalization.safety);
    const double eps = node.normalization.eps * scale;
    const double denominator =
        node.normalization.mode == dsl::Normalization::Mode::Add ? round_to(t, scaled + eps) : std::max(scaled, round_to(t, node.normalization.eps) * scale);
    // The division happens in the accumulate type (f32 or wider), before the cast to storage.
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t c = 0; c < x.cols; ++c) out.at(r, c) = store(node, x.at(r, c) * scale / denominator);
  }

  // AOL (dsl::Normalization::Kind::Aol) on y = x·scale (exact): d_i = Σ_j |Σ_k y_ik·y_jk| (f64 sums,
  // rounded to the norm type), s_i = 1/√max(d_i, eps·scale²) (rounded to the norm type), out = y·s_i
  // stored like every value. The scale cancels: the result is that of x itself.
  void aol_normalize(const ir::Node& node, const View& x, const View& out, double scale) {
    const ScalarType t = node.norm_type;
    const double floor = round_to(t, node.normalization.eps) * scale * scale;
    for (int64_t i = 0; i < x.rows; ++i) {
      double row_sum = 0;
      for (int64_t j = 0; j < x.rows; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < x.cols; ++k) dot += (x.at(i, k) * scale) * (x.at(j, k) * scale);
        row_sum += std::fabs(dot);
      }
      const double d = round_to(t, row_sum);
      const double s = round_to(t, 1.0 / std::sqrt(std::max(d, floor)));
      for (int64_t c = 0; c < x.cols; ++c) out.at(i, c) = store(node, x.at(i, c) * scale * s);
    }
  }

  void gemm(const ir::Node& node, const View& out) {
    const View a = operand(node, 0), b = operand(node, 1);
    const int64_t m = a.rows, k_dim = a.cols, n = b.cols;
    // Pack A row-major and B column-major so every dot product reads contiguous memory.
    packed_a_.resize(static_cast<size_t>(m * k_dim));
    packed_b_.resize(static_cast<size_t>(n * k_dim));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t k = 0; k < k_dim; ++k) packed_a_[static_cast<size_t>(i * k_dim + k)] = a.at(i, k);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < k_dim; ++k) packed_b_[static_cast<size_t>(j * k_dim + k)] = b.at(k, j);
    const bool has_c = node.operands.size() == 3;
    const View c = has_c ? operand(node, 2) : View{};
    if (products_) {
      sums_.resize(static_cast<size_t>(m * n));
      products_(m, n, k_dim, packed_a_.data(), packed_b_.data(), sums_.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = node.symmetric ? i : 0; j < n; ++j) {
          double value = node.alpha * sums_[static_cast<size_t>(i * n + j)];
          if (has_c) value += node.beta * c.at(i, j);
          if (i == j) value += node.gamma;
          out.at(i, j) = store(node, value);
          if (node.symmetric) out.at(j, i) = out.at(i, j);
        }
      return;
    }
    for (int64_t i = 0; i < m; ++i) {
      // Symmetric results: compute the upper triangle and mirror it, as a triangular kernel does.
      for (int64_t j = node.symmetric ? i : 0; j < n; ++j) {
        const double* row = &packed_a_[static_cast<size_t>(i * k_dim)];
        const double* col = &packed_b_[static_cast<size_t>(j * k_dim)];
        double sum = 0.0;
        for (int64_t k = 0; k < k_dim; ++k) sum += row[k] * col[k];
        double value = node.alpha * sum;
        if (has_c) value += node.beta * c.at(i, j);
        if (i == j) value += node.gamma;
        out.at(i, j) = store(node, value);
        if (node.symmetric) out.at(j, i) = out.at(i, j);
      }
    }
  }

  void lincomb(const ir::Node& node, const View& out) {
    std::vector<View> terms;
    for (size_t k = 0; k < node.operands.size(); ++k) terms.push_back(operand(node, k));
    for (int64_t i = 0; i < out.rows; ++i)
      for (int64_t j = 0; j < out.cols; ++j) {
        double value = i == j ? node.gamma : 0.0;
        for (size_t k = 0; k < terms.size(); ++k) value += node.coefficients[k] * terms[k].at(i, j);
        out.at(i, j) = store(node, value);
      }
  }

  const ir::Function& function_;
  std::vector<std::vector<double>> slots_;
  std::vector<int> node_slot_;
  std::vector<View> views_;
  std::vector<double> packed_a_, packed_b_, sums_;
  const ProductHook& products_;
};

}  // namespace

std::vector<double> interpret(const ir::Function& function, const std::vector<double>& input) { return interpret(function, input, {}); }

void interpret_muon_step(const ir::Function& function, const std::vector<ir::MuonStepMatrix>& matrices, const ProductHook& products) {
  if (!function.muon_step) throw std::invalid_argument("interpret_muon_step: the function is an orthogonalizer, not a Muon step");
  if (!function.input_shape.is_known()) throw std::logic_error("interpret: the IR is not shape-specialized");
  if (static_cast<int64_t>(matrices.size()) != function.batch)
    throw std::invalid_argument("interpret_muon_step: " + std::to_string(matrices.size()) + " matrices for a step compiled for " + std::to_string(function.batch));
  Interpreter interpreter(function, products);
  for (const ir::MuonStepMatrix& matrix : matrices) interpreter.run(nullptr, nullptr, &matrix);
}

std::vector<double> interpret(const ir::Function& function, const std::vector<double>& input, const ProductHook& products) {
  if (!function.input_shape.is_known()) throw std::logic_error("interpret: the IR is not shape-specialized");
  if (function.muon_step) throw std::invalid_argument("interpret: the function is a Muon step (use interpret_muon_step)");
  const int64_t per_matrix = function.input_shape.elements();
  if (static_cast<int64_t>(input.size()) != per_matrix * function.batch)
    throw std::invalid_argument("interpret: input has " + std::to_string(input.size()) + " values, expected " +
                                std::to_string(function.batch) + " x " + function.input_shape.to_string());
  std::vector<double> output(input.size());
  Interpreter interpreter(function, products);
  for (int64_t item = 0; item < function.batch; ++item)
    interpreter.run(input.data() + item * per_matrix, output.data() + item * per_matrix);
  return output;
}

}  // namespace orthojit::reference
