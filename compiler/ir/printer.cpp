// IR printer. One line per node:  %id = op operands {attributes} : type[shape] facts  # provenance
#include "ir/printer.h"

#include <cmath>
#include <sstream>

namespace orthojit::ir {
namespace {

std::string number(double value) {
  std::ostringstream out;
  out.precision(10);
  out << value;
  return out.str();
}

std::string id(NodeId node) { return "%" + std::to_string(node); }

}  // namespace

std::string format_polynomial(const std::vector<double>& coefficients, const std::string& variable) {
  std::string out;
  for (size_t power = 0; power < coefficients.size(); ++power) {
    const double c = coefficients[power];
    if (c == 0.0) continue;
    std::string term = number(std::fabs(c));
    if (power >= 1) term += "·" + variable;
    if (power >= 2) term += "^" + std::to_string(power);
    out += out.empty() ? (c < 0 ? "-" : "") + term : (c < 0 ? " - " : " + ") + term;
  }
  return out.empty() ? "0" : out;
}

std::string print_function(const Function& function) {
  std::ostringstream out;
  out << "func @" << function.name << "(G: f32[" << function.input_shape.to_string() << "])"
      << " batch=" << function.batch << " strategy=" << to_string(function.strategy.kind);
  if (function.strategy.kind == StrategyKind::Gram) {
    out << " restarts=[";
    for (size_t i = 0; i < function.strategy.gram_restarts.size(); ++i) out << (i ? "," : "") << function.strategy.gram_restarts[i];
    out << "]";
  }
  out << " policy{storage=" << to_string(function.policy.storage) << " accumulate=" << to_string(function.policy.accumulate)
      << " norm=" << to_string(function.policy.norm) << "}";
  if (function.oriented) out << " oriented(tall input runs transposed)";
  if (function.muon_step) out << " muon_step{" << function.muon_step->describe() << "}";
  out << "\n";
  if (!function.applied_passes.empty()) {
    out << "  ; passes:";
    for (const auto& pass : function.applied_passes) out << " " << pass;
    out << "\n";
  }
  int current_step = -2;
  for (size_t i = 0; i < function.nodes.size(); ++i) {
    const Node& node = function.nodes[i];
    if (node.step != current_step && node.step >= 0) {
      current_step = node.step;
      const size_t step = static_cast<size_t>(node.step);
      out << "  ; step " << node.step;
      if (step < function.steps.size()) {
        const auto& info = function.steps[step];
        out << " (a=" << number(info.triple.a) << ", b=" << number(info.triple.b) << ", c=" << number(info.triple.c) << ")";
        if (info.recognized) out << "  X <- p(A)·X, p(A) = " << format_polynomial(info.polynomial, "A");
        else if (!info.blocker_reason.empty()) out << "  not odd-polynomial: " << info.blocker_reason;
      }
      out << "\n";
    } else if (node.step < 0 && current_step >= 0) {
      current_step = -1;
      out << "  ; epilogue\n";
    }
    out << "  " << id(static_cast<NodeId>(i)) << " = " << to_string(node.kind);
    switch (node.kind) {
      case OpKind::Input: break;
      case OpKind::Normalize: {
        const auto& n = node.normalization;
        if (n.kind == dsl::Normalization::Kind::Aol) {
          out << " " << id(node.operands[0]) << " {aol, norm=" << to_string(node.norm_type) << ", eps=" << number(n.eps) << "}";
          break;
        }
        out << " " << id(node.operands[0]) << " {frobenius, norm=" << to_string(node.norm_type) << ", safety=" << number(n.safety)
            << ", eps=" << number(n.eps) << (n.mode == dsl::Normalization::Mode::Clamp ? ", clamp" : "") << "}";
        break;
      }
      case OpKind::Transpose:
      case OpKind::Output: out << " " << id(node.operands[0]); break;
      case OpKind::Momentum:
        out << " " << id(node.operands[0]) << " {" << (function.muon_step->ema ? "ema" : "sum") << (function.muon_step->nesterov ? ", nesterov" : "")
            << ", state f32" << (node.fused ? ", fused into its normalize" : "") << "}";
        break;
      case OpKind::Update:
        out << " " << id(node.operands[0]) << " {p <- p·decay - step·O" << (node.fused ? ", fused into the producer's epilogue" : "") << "}";
        break;
      case OpKind::Gemm: {
        out << " ";
        if (node.alpha != 1.0) out << number(node.alpha) << "·";
        out << id(node.operands[0]) << " @ " << id(node.operands[1]);
        if (node.operands.size() > 2) out << (node.beta < 0 ? " - " : " + ") << number(std::fabs(node.beta)) << "·" << id(node.operands[2]);
        if (node.gamma != 0.0) out << (node.gamma < 0 ? " - " : " + ") << number(std::fabs(node.gamma)) << "·I";
        out << " {acc=" << to_string(node.accumulate) << "}";
        break;
      }
      case OpKind::LinComb: {
        out << " ";
        for (size_t k = 0; k < node.operands.size(); ++k) {
          const double c = node.coefficients[k];
          out << (k == 0 ? (c < 0 ? "-" : "") : (c < 0 ? " - " : " + ")) << number(std::fabs(c)) << "·" << id(node.operands[k]);
        }
        if (node.gamma != 0.0) out << (node.gamma < 0 ? " - " : " + ") << number(std::fabs(node.gamma)) << "·I";
        break;
      }
    }
    out << " : " << to_string(node.type) << "[" << node.shape.to_string() << "]";
    if (node.symmetric) out << " sym";
    if (node.kind == OpKind::Transpose) out << " view";
    if (node.buffer >= 0) out << " buf" << node.buffer;
    if (!node.name.empty()) out << "  # " << node.name;
    out << "\n";
  }
  if (!function.buffers.empty()) {
    out << "  ; buffers:";
    int64_t bytes = 0;
    for (size_t b = 0; b < function.buffers.size(); ++b) {
      out << " buf" << b << "=" << to_string(function.buffers[b].type) << "[" << function.buffers[b].elements << "]";
      bytes += function.buffers[b].elements * size_in_bytes(function.buffers[b].type);
    }
    out << "  (" << bytes << " bytes per matrix)\n";
  }
  return out.str();
}

}  // namespace orthojit::ir
